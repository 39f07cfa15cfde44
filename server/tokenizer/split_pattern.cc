#include "server/tokenizer/split_pattern.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"
#include "server/tokenizer/utf8.h"

namespace posbias::tokenizer {
namespace {

pcre2_code* Code(void* code) { return static_cast<pcre2_code*>(code); }

std::string Pcre2Message(int error) {
  PCRE2_UCHAR buffer[256];
  if (pcre2_get_error_message(error, buffer, sizeof buffer) < 0)
    return absl::StrCat("error ", error);
  return std::string(reinterpret_cast<const char*>(buffer));
}

// Frees what one Split call allocates.
struct MatchScratch {
  pcre2_match_data* data = nullptr;
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* jit_stack = nullptr;
  ~MatchScratch() {
    pcre2_match_data_free(data);
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(jit_stack);
  }
};

}  // namespace

std::string TranslateOnigurumaPattern(std::string_view pattern) {
  std::string out;
  out.reserve(pattern.size() + 32);
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] != '\\' || i + 1 == pattern.size()) {
      out.push_back(pattern[i]);
      continue;
    }
    const char next = pattern[++i];
    if (next == 's') {
      out.append("\\p{White_Space}");
    } else if (next == 'S') {
      out.append("\\P{White_Space}");
    } else {
      out.push_back('\\');
      out.push_back(next);
    }
  }
  return out;
}

absl::StatusOr<std::unique_ptr<SplitPattern>> SplitPattern::Compile(const std::string& pattern,
                                                                    bool literal) {
  std::unique_ptr<SplitPattern> split(new SplitPattern());
  split->pcre2_pattern_ = literal ? pattern : TranslateOnigurumaPattern(pattern);
  int error = 0;
  PCRE2_SIZE error_offset = 0;
  const uint32_t options =
      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
  split->code_ =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(split->pcre2_pattern_.data()),
                    split->pcre2_pattern_.size(), options, &error, &error_offset, nullptr);
  if (split->code_ == nullptr) {
    return ErrorWithReason(
        absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
        absl::StrCat("the pre-tokenizer's split pattern does not compile at offset ", error_offset,
                     ": ", Pcre2Message(error)));
  }
  split->jit_ = pcre2_jit_compile(Code(split->code_), PCRE2_JIT_COMPLETE) == 0;
  return split;
}

SplitPattern::~SplitPattern() { pcre2_code_free(Code(code_)); }

absl::StatusOr<std::vector<std::pair<size_t, size_t>>> SplitPattern::Split(
    std::string_view text) const {
  MatchScratch scratch;
  scratch.data = pcre2_match_data_create_from_pattern(Code(code_), nullptr);
  scratch.context = pcre2_match_context_create(nullptr);
  if (scratch.data == nullptr || scratch.context == nullptr) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           "no memory for a regex match");
  }
  if (jit_) {
    // The JIT's own stack, per call (a JIT stack serves one thread at a time).
    scratch.jit_stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    if (scratch.jit_stack != nullptr)
      pcre2_jit_stack_assign(scratch.context, nullptr, scratch.jit_stack);
  }
  std::vector<std::pair<size_t, size_t>> pieces;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t at = 0;       // Where the next search starts.
  size_t emitted = 0;  // End of the last piece.
  while (at < text.size()) {
    const int rc = pcre2_match(Code(code_), subject, text.size(), at, PCRE2_NO_UTF_CHECK,
                               scratch.data, scratch.context);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kRequestTooLarge,
                             absl::StrCat("the pre-tokenizer's regex gave up on a ", text.size(),
                                          "-byte text: ", Pcre2Message(rc)));
    }
    const PCRE2_SIZE* vector = pcre2_get_ovector_pointer(scratch.data);
    const size_t begin = vector[0], end = vector[1];
    if (end == begin) {  // An empty match splits nothing; search again one character on.
      if (begin >= text.size()) break;
      at = begin + Utf8CharLength(text, begin);
      continue;
    }
    if (begin > emitted) pieces.emplace_back(emitted, begin);
    pieces.emplace_back(begin, end);
    emitted = at = end;
  }
  if (emitted < text.size()) pieces.emplace_back(emitted, text.size());
  return pieces;
}

}  // namespace posbias::tokenizer
