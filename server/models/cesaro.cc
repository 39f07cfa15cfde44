// The Cesaro routing family in LibTorch as a DecoderModel (MakeCesaroModel, families.h): no
// weights but a fixed random token embedding, each layer mixing in the causal running mean.
#include <cstdint>
#include <memory>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "server/models/families.h"
#include "server/models/layers.h"

namespace posbias::models {
namespace {

using layers::BranchRatio;

// h <- (1 - alpha) h + alpha * causal-mean(h) per layer; no final norm; a fixed random token
// embedding (normal(0, range)) so token inputs work too.
class CesaroModel final : public DecoderModel {
 public:
  CesaroModel(const ModelConfig& config, uint64_t seed) : config_(config) {
    embed_ = torch::zeros({config.vocab_size, config.hidden_size});
    layers::Initializer(seed).Normal(embed_, config.initializer_range);
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override {
    return absl::StrCat("cesaro routing, alpha = ", config_.cesaro_alpha, "; token embedding normal(0, ",
                        config_.initializer_range, ")");
  }
  torch::Tensor Embed(const torch::Tensor& ids) override { return torch::embedding(embed_, ids); }
  ForwardOutput Forward(const torch::Tensor& e, const ForwardOptions& options) override {
    ForwardOutput out;
    const double alpha = config_.cesaro_alpha;
    auto counts = torch::arange(1, e.size(1) + 1, e.options()).view({1, e.size(1), 1});
    auto h = e;
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      auto branch = alpha * (torch::cumsum(h, 1) / counts);
      if (options.record_branch_ratios) out.branch_ratio.push_back(BranchRatio((1 - alpha) * h, branch));
      h = (1 - alpha) * h + branch;
      if (options.record_layers) out.layers.push_back(h);
    }
    out.hidden = h;
    return out;
  }
  torch::Tensor Logits(const torch::Tensor& hidden) override { return torch::matmul(hidden, embed_.t()); }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override {
    return {{"embed_tokens.weight", embed_}};
  }
  void To(const torch::Device& device, torch::Dtype dtype) override { embed_ = embed_.to(device, dtype); }

 private:
  ModelConfig config_;
  torch::Tensor embed_;
};

}  // namespace

std::unique_ptr<DecoderModel> MakeCesaroModel(const ModelConfig& config, uint64_t seed) {
  return std::make_unique<CesaroModel>(config, seed);
}

}  // namespace posbias::models
