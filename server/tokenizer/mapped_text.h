// Text on its way through the tokenizer, each byte remembering which bytes of the caller's input
// it came from, so that token offsets always point into the original input.
//
// A byte copied through unchanged maps to exactly its input byte; a byte produced by a rewrite (a
// U+FFFD standing for invalid UTF-8, an NFC-composed character) maps to the whole input span the
// rewrite consumed. A token's offsets are then [origin_begin of its first byte, origin_end of its
// last byte).
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace posbias::tokenizer {

struct MappedText {
  std::string text;
  std::vector<size_t> origin_begin;  // One entry per byte of `text`.
  std::vector<size_t> origin_end;

  // Appends `bytes`, each byte mapped to [begin, end) of the input.
  void AppendSpan(std::string_view bytes, size_t begin, size_t end) {
    text.append(bytes);
    origin_begin.insert(origin_begin.end(), bytes.size(), begin);
    origin_end.insert(origin_end.end(), bytes.size(), end);
  }

  // The input span of bytes [from, to) of `text` (to > from).
  std::pair<size_t, size_t> OriginOf(size_t from, size_t to) const {
    return {origin_begin[from], origin_end[to - 1]};
  }

  // Bytes [from, to) of this text, with their origins.
  MappedText Slice(size_t from, size_t to) const {
    MappedText slice;
    slice.text = text.substr(from, to - from);
    slice.origin_begin.assign(origin_begin.begin() + from, origin_begin.begin() + to);
    slice.origin_end.assign(origin_end.begin() + from, origin_end.begin() + to);
    return slice;
  }
};

}  // namespace posbias::tokenizer
