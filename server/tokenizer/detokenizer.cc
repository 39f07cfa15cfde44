#include "server/tokenizer/detokenizer.h"

#include <string_view>
#include <utility>

#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "server/tokenizer/bpe.h"
#include "server/tokenizer/utf8.h"

namespace posbias::tokenizer {
namespace {

constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD.

// Whether bytes are well-formed UTF-8 (RepairUtf8String leaves them as they are).
bool IsValidUtf8(const std::string& bytes) { return RepairUtf8String(bytes) == bytes; }

std::vector<std::string> ByteFallback(std::vector<std::string> tokens) {
  std::vector<std::string> out;
  std::string run;
  size_t run_tokens = 0;
  const auto flush = [&] {
    if (run_tokens == 0) return;
    if (IsValidUtf8(run)) {
      out.push_back(std::move(run));
    } else {
      for (size_t k = 0; k < run_tokens; ++k) out.emplace_back(kReplacementCharacter);
    }
    run.clear();
    run_tokens = 0;
  };
  for (std::string& token : tokens) {
    uint8_t byte = 0;
    if (ParseByteFallbackToken(token, &byte)) {
      run.push_back(static_cast<char>(byte));
      ++run_tokens;
    } else {
      flush();
      out.push_back(std::move(token));
    }
  }
  flush();
  return out;
}

void Strip(std::string* token, std::string_view character, size_t start, size_t stop) {
  if (character.empty()) return;
  size_t front = 0;
  for (size_t k = 0; k < start && token->compare(front, character.size(), character) == 0; ++k)
    front += character.size();
  token->erase(0, front);
  for (size_t k = 0; k < stop && token->size() >= character.size() &&
                     token->compare(token->size() - character.size(), character.size(), character) == 0;
       ++k) {
    token->resize(token->size() - character.size());
  }
}

}  // namespace

std::string DecodeTokens(std::vector<std::string> tokens, const std::vector<DecoderStep>& steps) {
  for (const DecoderStep& step : steps) {
    switch (step.kind) {
      case DecoderStep::Kind::kReplace:
        for (std::string& token : tokens) token = absl::StrReplaceAll(token, {{step.pattern, step.content}});
        break;
      case DecoderStep::Kind::kByteFallback:
        tokens = ByteFallback(std::move(tokens));
        break;
      case DecoderStep::Kind::kFuse:
        tokens = {absl::StrJoin(tokens, "")};
        break;
      case DecoderStep::Kind::kStrip:
        for (std::string& token : tokens) Strip(&token, step.pattern, step.start, step.stop);
        break;
      case DecoderStep::Kind::kMetaspace:
        for (size_t i = 0; i < tokens.size(); ++i) {
          tokens[i] = absl::StrReplaceAll(tokens[i], {{step.pattern, i == 0 && step.strip_first ? "" : " "}});
        }
        break;
    }
  }
  return RepairUtf8String(absl::StrJoin(tokens, ""));
}

}  // namespace posbias::tokenizer
