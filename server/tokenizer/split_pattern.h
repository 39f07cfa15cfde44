// The pre-tokenizer's split: a Unicode regex (Oniguruma syntax in tokenizer.json) run with PCRE2
// in UTF + UCP mode, JIT-compiled where PCRE2 has a JIT.
//
// One translation keeps PCRE2 faithful to the Oniguruma patterns these files are written for:
// `\s` / `\S` become `\p{White_Space}` / `\P{White_Space}` (Oniguruma's and the Unicode
// definition; PCRE2's own \s differs on U+0085 and U+180E). Everything else (`\p{L}`, `\p{N}`,
// `(?i:...)`, lookahead) PCRE2 reads as Oniguruma does.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::tokenizer {

class SplitPattern {
 public:
  // `pattern` a regex, or a literal string when `literal`.
  static absl::StatusOr<std::unique_ptr<SplitPattern>> Compile(const std::string& pattern,
                                                               bool literal);
  ~SplitPattern();
  SplitPattern(const SplitPattern&) = delete;
  SplitPattern& operator=(const SplitPattern&) = delete;

  // The pieces of `text` (valid UTF-8) as [begin, end) byte ranges, in order, covering it: every
  // match and every non-empty gap between matches is a piece (Hugging Face's "Isolated" split).
  // Thread-safe.
  absl::StatusOr<std::vector<std::pair<size_t, size_t>>> Split(std::string_view text) const;

  // The pattern as PCRE2 compiled it (after the \s translation).
  const std::string& pcre2_pattern() const { return pcre2_pattern_; }

 private:
  SplitPattern() = default;
  std::string pcre2_pattern_;
  void* code_ = nullptr;  // pcre2_code_8.
  bool jit_ = false;
};

// `\s` → `\p{White_Space}`, `\S` → `\P{White_Space}` outside and inside character classes.
std::string TranslateOnigurumaPattern(std::string_view pattern);

}  // namespace posbias::tokenizer
