#include "server/text/model_tokenizers.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::text {

absl::StatusOr<std::shared_ptr<const tokenizer::Tokenizer>> Tokenizers::For(const registry::ModelEntry& entry) {
  if (entry.tokenizer_dir.empty()) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           absl::StrCat("model ", entry.name, " has no tokenizer: only a checkpoint directory with "
                                        "tokenizer.json, or vocab.json and merges.txt, brings one"));
  }
  {
    std::lock_guard lock(mutex_);
    if (auto it = loaded_.find(entry.name); it != loaded_.end() && it->second.first == entry.tokenizer_dir) {
      return it->second.second;
    }
  }
  tokenizer::LoadOptions options;
  options.scope = entry.tokenizer_scope;  // Every file opened beneath the owner's folder, at every (re)load.
  auto loaded = tokenizer::Tokenizer::FromDirectory(entry.tokenizer_dir, options);  // Outside the lock: it takes a while.
  if (!loaded.ok()) return loaded.status();
  std::shared_ptr<const tokenizer::Tokenizer> shared = *std::move(loaded);
  std::lock_guard lock(mutex_);
  loaded_[entry.name] = {entry.tokenizer_dir, shared};
  return shared;
}

absl::Status RunTokenize(const tokenizer::Tokenizer& tokenizer, const v1::TokenizeRequest& request,
                         v1::TokenizeResponse* response) {
  if (auto eos = tokenizer.eos_token_id()) response->set_eos_token_id(static_cast<uint32_t>(*eos));
  if (request.has_token_ids()) {
    const auto& ids = request.token_ids().ids();
    if (ids.size() > kMaxTokenizeIds) {
      return TooLargeError("token_ids.ids", absl::StrCat(ids.size(), " ids"), limits::Allowed(limits::Limit::kMaxTokenizeIds));
    }
    std::vector<int64_t> wide(ids.begin(), ids.end());
    auto text = tokenizer.Decode(wide);
    if (!text.ok()) return text.status();
    response->mutable_token_ids()->Add(ids.begin(), ids.end());
    response->set_text(*std::move(text));
    return absl::OkStatus();
  }
  if (!request.has_text()) {
    return InvalidArgumentError({ErrorReason::kEmptyRequest, "input", "unset", "text or token_ids"});
  }
  if (request.text().size() > kMaxTokenizeTextBytes) {
    return TooLargeError("text", absl::StrCat(request.text().size(), " bytes"), limits::Allowed(limits::Limit::kMaxTokenizeTextBytes));
  }
  tokenizer::EncodeOptions options;
  options.special_tokens_as_text = request.special_tokens_as_text();
  auto encoding = tokenizer.Encode(request.text(), options);
  if (!encoding.ok()) return encoding.status();
  for (size_t i = 0; i < encoding->ids.size(); ++i) {
    response->add_token_ids(static_cast<uint32_t>(encoding->ids[i]));
    auto* offset = response->add_offsets();
    offset->set_start(static_cast<uint32_t>(encoding->byte_offsets[i].first));
    offset->set_end(static_cast<uint32_t>(encoding->byte_offsets[i].second));
  }
  return absl::OkStatus();
}

}  // namespace posbias::text
