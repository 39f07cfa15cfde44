// What the one decoder (decoder.cc) and the Cesaro routing model (cesaro.cc) share, private to the
// room: causal attention, rotary positions, heads, branch ratios, checkpointed layers and the
// seeded Hugging Face initialization.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "server/models/config.h"
#include "server/models/model.h"

namespace posbias::models::layers {

// ---- shared pieces -------------------------------------------------------------------------

// Half-precision activations are upcast to float32 where Hugging Face does (softmax, RMSNorm);
// float32 and float64 keep their own precision.
torch::Dtype AtLeastFloat32(torch::Dtype dtype);

// How causal attention forms its probabilities.
struct AttentionRule {
  // Logits zero: each position averages its prefix (a running mean, O(L) instead of O(L^2)).
  bool uniform = false;
  // The probabilities are constants of the graph (the value pathway only).
  bool detach_probabilities = false;
  // > 0: position i attends to i - window + 1 .. i only (Hugging Face's sliding_window mask: keys
  // j <= i - window are hidden); uniform attention then averages that window.
  int64_t window = 0;
  double scale = 0;    // The scores' scale; 0 = head_dim^-1/2.
  double softcap = 0;  // > 0: scores c tanh(S / c) (Gemma 2).
};

// Causal attention of q [B, Hq, L, hd] over k, v [B, Hkv, L, hd]; kv heads are shared by
// Hq / Hkv query heads (grouped-query attention).
torch::Tensor CausalAttention(torch::Tensor q, torch::Tensor k, torch::Tensor v, const AttentionRule& rule);

// The rotary inverse frequencies of `config`'s layer `layer` over `dim` dimensions for a sequence
// of `length` positions: theta^(-2i / dim), i = 0..dim/2-1, with rope_theta and rope_scaling
// (linear: divided by factor; llama3: transformers' _compute_llama3_parameters; longrope: divided
// by the short or, past the original length, the long factors), or rope_local_theta unscaled on a
// sliding layer of a family with two bases; in `options`' dtype (at least float32) and device.
torch::Tensor RotaryInverseFrequencies(const ModelConfig& config, int64_t layer, int64_t length, int64_t dim,
                                       const torch::TensorOptions& options);
// The factor on cos and sin: longrope's attention factor, else 1.
double RotaryScale(const ModelConfig& config);
// x * cos + rotate_half(x) * sin over the last dimension of x [B, H, L, dim], positions 0..L-1,
// rotate_half = (-x2, x1), as Hugging Face applies it; cos and sin times `scale`.
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& inverse_frequencies, double scale = 1.0);

// [B, L, H*hd] -> [B, H, L, hd] and back.
torch::Tensor SplitHeads(const torch::Tensor& x, int64_t heads);
torch::Tensor MergeHeads(const torch::Tensor& x);

// Mean over batch and positions of ||branch_j|| / (||residual_j|| + ||branch_j||).
double BranchRatio(const torch::Tensor& residual, const torch::Tensor& branch);

// Runs `call` on h, checkpointed when asked and a graph is being recorded.
torch::Tensor RunLayer(const torch::Tensor& h, bool checkpoint,
                       std::function<torch::Tensor(const torch::Tensor&)> call);

// Seeded normal initialization in a fixed parameter order, on the CPU in float32.
class Initializer {
 public:
  explicit Initializer(uint64_t seed);
  void Normal(torch::Tensor& tensor, double std);

 private:
  at::Generator generator_;
};

// ---- adapters ------------------------------------------------------------------------------

std::vector<std::pair<std::string, torch::Tensor>> Named(torch::nn::Module& module);

// Hugging Face init: normal(0, range) for weights and embeddings, zero biases, unit norm weights
// (zero where `one_plus_norms`: Gemma's norms scale by 1 + w);
// the weights of the projections named in `scaled_projections` (GPT-2's c_proj, architecture.h:
// scaled_residual_init) at range / sqrt(2 H). Draws in parameter order. Returns the recipe.
std::string InitializeWeights(torch::nn::Module& module, const ModelConfig& config, uint64_t seed,
                              const std::vector<std::string>& scaled_projections = {}, bool one_plus_norms = false);

}  // namespace posbias::models::layers
