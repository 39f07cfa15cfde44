// The tokenizers of registered models, loaded on first use and kept (a tokenizer of ~150k tokens
// takes ~0.3 s to read and some tens of MiB): Tokenize and the text inputs of jobs use them.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "posbias/v1/model_service.pb.h"
#include "server/limits/limits.h"
#include "server/registry/model_entry.h"
#include "server/tokenizer/tokenizer.h"

namespace posbias::text {

class Tokenizers {
 public:
  // The tokenizer of `entry`; FAILED_PRECONDITION when the model has none, the tokenizer room's
  // errors (UNIMPLEMENTED for another kind, INVALID_ARGUMENT for a damaged file) otherwise.
  absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> For(const registry::ModelEntry& entry);

 private:
  std::mutex mutex_;
  std::map<std::string, std::pair<std::string, std::shared_ptr<const tokenizer::Tokenizer>>> loaded_;  // name -> (dir, it)
};

// Tokenize: the request's bounds checked, then text -> ids with offsets or ids -> text.
absl::Status RunTokenize(const tokenizer::Tokenizer& tokenizer, const v1::TokenizeRequest& request,
                         v1::TokenizeResponse* response);

inline constexpr size_t kMaxTokenizeTextBytes = limits::Default<size_t>(limits::Limit::kMaxTokenizeTextBytes);
inline constexpr int kMaxTokenizeIds = limits::Default<int>(limits::Limit::kMaxTokenizeIds);

}  // namespace posbias::text
