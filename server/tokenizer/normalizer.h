// Unicode normalization of a tokenizer's text (the `normalizer` of tokenizer.json), through ICU.
//
// Offsets survive normalization: ICU's UTF-8 normalizer reports its edits (icu::Edits), span by
// span. A span NFC left alone keeps its byte-for-byte mapping; the bytes of a span it rewrote
// (e.g. "e" + U+0301 composed to "é") all map to the whole input span it consumed. So a token's
// offsets always cover the input bytes it came from, and at most widen to the edges of a rewritten
// span.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "server/tokenizer/mapped_text.h"

namespace posbias::tokenizer {

enum class NormalizationForm { kNfc, kNfkc };

class Normalizer {
 public:
  static absl::StatusOr<std::unique_ptr<Normalizer>> Create(NormalizationForm form);

  // `text` normalized, each output byte mapped through to the input bytes.
  absl::StatusOr<MappedText> Normalize(const MappedText& text) const;

 private:
  explicit Normalizer(const void* icu_normalizer) : icu_normalizer_(icu_normalizer) {}
  const void* icu_normalizer_;  // icu::Normalizer2, a singleton owned by ICU.
};

}  // namespace posbias::tokenizer
