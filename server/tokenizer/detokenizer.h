// The `decoder` of a SentencePiece-style tokenizer.json: token strings back to text, step by step,
// each step over the list of token strings as Hugging Face's Decoder::decode_chain:
//  - Replace: every occurrence of a literal pattern in each token by its content ("▁" → " ");
//  - ByteFallback: each run of <0xNN> tokens becomes the text of its bytes; a run that is not valid
//    UTF-8 becomes one U+FFFD per byte (Hugging Face's rule; every run an encoding makes is valid);
//  - Fuse: all tokens joined into one;
//  - Strip: up to `start` leading and `stop` trailing copies of one character cut off each token;
//  - Metaspace: the replacement character as a space, and left out altogether from the first token
//    when a prefix was prepended (prepend_scheme always or first), as Hugging Face's decoder does.
// (Byte-level BPE's ByteLevel decoder is the alphabet of bpe.h, applied per id in tokenizer.cc.)
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace posbias::tokenizer {

struct DecoderStep {
  enum class Kind { kReplace, kByteFallback, kFuse, kStrip, kMetaspace };
  Kind kind = Kind::kFuse;
  std::string pattern;  // kReplace: the literal text replaced; kStrip / kMetaspace: the character.
  std::string content;  // kReplace: the replacement.
  size_t start = 0;     // kStrip: copies cut at the front ...
  size_t stop = 0;      // ... and at the back.
  bool strip_first = false;  // kMetaspace: a prefix was prepended when encoding.
};

// The text of `tokens` after `steps`, valid UTF-8.
std::string DecodeTokens(std::vector<std::string> tokens, const std::vector<DecoderStep>& steps);

}  // namespace posbias::tokenizer
