// The `normalizer` steps of tokenizer.json: Unicode normalization through ICU (NFC, NFKC), and the
// two text edits of SentencePiece-style tokenizers, Prepend and Replace with a literal pattern.
//
// Offsets survive normalization: ICU's UTF-8 normalizer reports its edits (icu::Edits), span by
// span. A span NFC left alone keeps its byte-for-byte mapping; the bytes of a span it rewrote
// (e.g. "e" + U+0301 composed to "é") all map to the whole input span it consumed. So a token's
// offsets always cover the input bytes it came from, and at most widen to the edges of a rewritten
// span.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>

#include "absl/status/statusor.h"
#include "server/tokenizer/mapped_text.h"

namespace posbias::tokenizer {

struct NormalizerSpec {
  enum class Kind { kNfc, kNfkc, kPrepend, kReplace };
  Kind kind = Kind::kNfc;
  std::string pattern;  // kReplace: the literal text replaced.
  std::string content;  // kPrepend: the text put in front; kReplace: the replacement.
};

// `content` in front of a non-empty `text` (Hugging Face's Prepend), its bytes mapped to the input
// span of the first byte, so a token made of it alone still points at the text it precedes (and
// stays inside the offsets of the byte tokens that may follow for a character not in the
// vocabulary).
MappedText PrependText(const MappedText& text, std::string_view content);
// Every occurrence of `pattern` (non-empty), left to right and not overlapping, replaced by
// `content`, whose bytes map to the input span of the occurrence.
MappedText ReplaceText(const MappedText& text, std::string_view pattern, std::string_view content);

class Normalizer {
 public:
  static absl::StatusOr<std::unique_ptr<Normalizer>> Create(NormalizerSpec spec);

  // `text` normalized, each output byte mapped through to the input bytes.
  absl::StatusOr<MappedText> Normalize(const MappedText& text) const;

 private:
  Normalizer(NormalizerSpec spec, const void* icu_normalizer)
      : spec_(std::move(spec)), icu_normalizer_(icu_normalizer) {}
  absl::StatusOr<MappedText> NormalizeUnicode(const MappedText& text) const;

  NormalizerSpec spec_;
  const void* icu_normalizer_;  // NFC / NFKC: icu::Normalizer2, a singleton owned by ICU.
};

}  // namespace posbias::tokenizer
