// A user's TorchScript module as a DecoderModel: forward(inputs_embeds [B, L, d]) -> hidden [B, L, d].
#include <torch/script.h>

#include <limits>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/models/model.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

class TorchScriptModel final : public DecoderModel {
 public:
  TorchScriptModel(torch::jit::script::Module module, const std::string& path, int64_t hidden_size)
      : module_(std::move(module)) {
    config_.family = Family::kTorchScript;
    config_.hidden_size = hidden_size;
    config_.num_heads = config_.num_kv_heads = 1;
    config_.num_layers = 1;
    config_.max_positions = int64_t{1} << 20;
    config_.torchscript_path = path;
    module_.eval();
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override { return "torchscript: " + config_.torchscript_path; }
  bool has_token_embedding() const override { return false; }
  torch::Tensor Embed(const torch::Tensor&) override {
    throw c10::Error(c10::SourceLocation{__func__, __FILE__, static_cast<uint32_t>(__LINE__)},
                     "a TorchScript model takes input embeddings, not token ids");
  }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions&) override {
    ForwardOutput out;
    out.hidden = module_.forward({e}).toTensor();
    return out;
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override { return hidden; }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override {
    std::vector<std::pair<std::string, torch::Tensor>> named;
    for (const auto& item : module_.named_parameters(/*recurse=*/true)) named.emplace_back(item.name, item.value);
    return named;
  }
  void To(const torch::Device& device, torch::Dtype dtype) override { module_.to(device, dtype); }

 private:
  ModelConfig config_;
  torch::jit::script::Module module_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DecoderModel>> LoadTorchScriptModel(const std::string& path,
                                                                   int64_t hidden_size,
                                                                   const files::Scope& scope) {
  if (hidden_size < 1) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "width", std::to_string(hidden_size),
                                 ">= 1 (the module's embedding width d)"});
  }
  const std::string shown = files::ShownPath(scope, path);  // Messages never show the server's paths.
  try {
    // Read beneath the scope, then loaded from memory: torch's own open would follow any link.
    auto bytes = files::ReadBeneath(scope, path, std::numeric_limits<uint64_t>::max());
    if (!bytes.ok()) return bytes.status();
    std::istringstream stream(*std::move(bytes));
    auto module = torch::jit::load(stream);
    auto model = std::make_unique<TorchScriptModel>(std::move(module), shown, hidden_size);
    // The contract, checked once: [1, 4, d] in, [1, 4, d] out.
    torch::NoGradGuard no_grad;
    auto probe = torch::zeros({1, 4, hidden_size});
    auto out = model->Forward(probe, {}).hidden;
    if (out.sizes() != probe.sizes()) {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                             absl::StrCat(shown, ": forward([1, 4, ", hidden_size, "]) returned shape ",
                                          c10::str(out.sizes()), "; the contract is forward(inputs_embeds [B, L, d]) -> [B, L, d]"));
    }
    return std::unique_ptr<DecoderModel>(std::move(model));
  } catch (const c10::Error& error) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat(shown, ": not a usable TorchScript module: ", error.what_without_backtrace()));
  } catch (const std::exception& error) {  // Interpreter errors (torch::jit::JITException).
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat(shown, ": forward failed on [1, 4, ", hidden_size, "]: ", error.what()));
  }
}

}  // namespace posbias::models
