// What the LibTorch families (gpt2.cc, qwen2.cc, cesaro.cc) share, private to the room: causal
// attention, branch ratios, checkpointed layers, the pre-norm residual block and the one layer
// loop, the seeded Hugging Face initialization, the adapters of torch modules to the hand-written
// reverse pass (reverse_pass.h), and the DecoderModel around a Hugging Face module.
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
#include "server/models/reverse_pass.h"

namespace posbias::models::layers {

// ---- shared pieces -------------------------------------------------------------------------

// Half-precision activations are upcast to float32 where Hugging Face does (softmax, RMSNorm);
// float32 and float64 keep their own precision.
torch::Dtype AtLeastFloat32(torch::Dtype dtype);

// Causal attention of q [B, Hq, L, hd] over k, v [B, Hkv, L, hd]; kv heads are shared by
// Hq / Hkv query heads (grouped-query attention). With `uniform`, the logits are zero, so each
// position averages its prefix: computed as a running mean, O(L) instead of O(L^2). With
// `detach_probabilities` the probabilities are constants of the graph (the value pathway only).
// `window` > 0: position i attends to i - window + 1 .. i only (Hugging Face's sliding_window mask:
// keys j <= i - window are hidden); uniform attention then averages that window.
torch::Tensor CausalAttention(torch::Tensor q, torch::Tensor k, torch::Tensor v, bool uniform,
                              bool detach_probabilities = false, int64_t window = 0);

// RMSNorm as Hugging Face's LlamaRMSNorm / Qwen2RMSNorm: weight * x / sqrt(mean(x^2) + eps), the
// statistics in float32 or wider.
struct RmsNormImpl : torch::nn::Module {
  RmsNormImpl(int64_t size, double epsilon);
  torch::Tensor forward(const torch::Tensor& x);
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RmsNorm);

// The rotary inverse frequencies theta^(-2i / dim), i = 0..dim/2-1, of `config`'s rope_theta and
// rope_scaling (linear: divided by factor; llama3: transformers' _compute_llama3_parameters), in
// `options`' dtype (at least float32) and device.
torch::Tensor RotaryInverseFrequencies(const ModelConfig& config, int64_t dim, const torch::TensorOptions& options);
// x * cos + rotate_half(x) * sin over the last dimension of x [B, H, L, dim], positions 0..L-1,
// rotate_half = (-x2, x1), as Hugging Face applies it.
torch::Tensor ApplyRotary(const torch::Tensor& x, const torch::Tensor& inverse_frequencies);

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

// ---- the decoder stack ---------------------------------------------------------------------

// A pre-norm residual block: h = x + attention(norm1(x)), then h + mlp(norm2(h)), or h alone
// where the MLP is ablated (norm2 and mlp then stay empty). Each family's block registers the
// parts under its Hugging Face names, in this order (the seeded initializer draws in it). The
// attention takes (x, detach_probabilities) (ForwardOptions::detach_attention_probabilities).
template <typename Norm, typename Attention, typename Mlp>
struct PreNormBlock : torch::nn::Module {
  torch::Tensor forward(const torch::Tensor& x, double* branch_ratio, bool detach_probabilities = false) {
    auto a = attention(norm1(x), detach_probabilities);
    if (branch_ratio) *branch_ratio = BranchRatio(x, a);
    auto h = x + a;
    return mlp.is_empty() ? h : h + mlp(norm2(h));
  }
  Norm norm1{nullptr}, norm2{nullptr};
  Attention attention{nullptr};
  Mlp mlp{nullptr};
};

// The layer loop of a decoder stack: every block of `layers` (each a LayerImpl) in turn on the
// residual stream e, checkpointed when asked; `hidden` is final_norm of the last block's output.
template <typename LayerImpl, typename FinalNorm>
ForwardOutput RunDecoderLayers(torch::nn::ModuleList& layers, const torch::Tensor& e,
                               const ForwardOptions& options, FinalNorm& final_norm) {
  ForwardOutput out;
  auto h = e;
  for (const auto& module : *layers) {
    double ratio = 0;
    double* ratio_out = options.record_branch_ratios ? &ratio : nullptr;
    auto* layer = module->as<LayerImpl>();
    const bool detach = options.detach_attention_probabilities;
    h = RunLayer(h, options.checkpoint_layers, [layer, ratio_out, detach](const torch::Tensor& x) {
      return layer->forward(x, ratio_out, detach);
    });
    if (options.record_branch_ratios) out.branch_ratio.push_back(ratio);
    if (options.record_layers) out.layers.push_back(h);
  }
  out.hidden = final_norm(h);
  return out;
}

// ---- adapters ------------------------------------------------------------------------------

std::vector<std::pair<std::string, torch::Tensor>> Named(torch::nn::Module& module);

// Hugging Face init: normal(0, range) for weights and embeddings, zero biases, unit norm weights;
// GPT-2 also rescales residual projections (c_proj) to range / sqrt(2 H). Returns the recipe.
std::string InitializeWeights(torch::nn::Module& module, const ModelConfig& config, uint64_t seed);

// ---- the families' weights for the hand-written reverse pass (reverse_pass.h) ----------------

reverse::Norm ReverseNorm(const torch::nn::LayerNorm& norm, double eps);
reverse::Norm ReverseNorm(const RmsNorm& norm);
reverse::Linear ReverseLinear(const torch::nn::Linear& linear);
// The attention's rotary part for the reverse pass: the inverse frequencies of `config` over its
// rotary_dims (RotaryInverseFrequencies, in `weight`'s stats dtype and device), none when the
// position encoding is ablated or the family has none.
void DescribeRotary(const ModelConfig& config, const torch::Tensor& weight, reverse::Attention& attention);

// A pre-norm block with RMSNorm, q/k/v/o projections and a SwiGLU MLP under Hugging Face's names
// (Qwen2, Llama, Mistral: input_layernorm, self_attn.{q,k,v,o}_proj, post_attention_layernorm,
// mlp.{gate,up,down}_proj) as a reverse-pass layer: one description for the three families, whose
// differences (biases, head_dim, rope_scaling, window) live in their weights and config.
template <typename LayerImpl>
void DescribeSwiGluLayer(const LayerImpl& decoder, const ModelConfig& config, reverse::Layer& layer) {
  layer.norm1 = ReverseNorm(decoder.norm1);
  const auto& attention = decoder.attention;
  layer.attention.q = ReverseLinear(attention->q_proj);
  layer.attention.k = ReverseLinear(attention->k_proj);
  layer.attention.v = ReverseLinear(attention->v_proj);
  layer.attention.o = ReverseLinear(attention->o_proj);
  layer.attention.heads = config.num_heads;
  layer.attention.kv_heads = config.num_kv_heads;
  layer.attention.window = config.sliding_window;
  if (attention->rotary) DescribeRotary(config, attention->q_proj->weight, layer.attention);
  if (!layer.has_mlp) return;
  layer.norm2 = ReverseNorm(decoder.norm2);
  layer.mlp.kind = reverse::Mlp::Kind::kSwiGlu;
  layer.mlp.in = ReverseLinear(decoder.mlp->up_proj);
  layer.mlp.gate = ReverseLinear(decoder.mlp->gate_proj);
  layer.mlp.out = ReverseLinear(decoder.mlp->down_proj);
}

// The reverse-pass stack of the blocks in `layers`: `describe` fills in each block's weights
// (the MLP switch and the uniform-attention ablation, which every family shares, are set first).
template <typename LayerImpl>
using Describer = void (*)(const LayerImpl& block, const ModelConfig& config, reverse::Layer& out);
template <typename LayerImpl>
reverse::Stack BuildReverseStack(torch::nn::ModuleList& layers, const ModelConfig& config,
                                 Describer<LayerImpl> describe, reverse::Norm final_norm) {
  reverse::Stack stack;
  for (const auto& item : *layers) {
    reverse::Layer layer;
    layer.attention.uniform = config.ablations.uniform_attention;
    layer.has_mlp = !config.ablations.no_mlp;
    describe(*item->as<LayerImpl>(), config, layer);
    stack.layers.push_back(std::move(layer));
  }
  stack.final_norm = std::move(final_norm);
  return stack;
}

// A Hugging Face module (its parameters under their Hugging Face names) as a DecoderModel, at the
// seeded Hugging Face initialization; the family adds embeddings, forward pass, logits and its
// weights for the reverse pass.
template <typename Module>
class HuggingFaceModel : public DecoderModel {
 public:
  HuggingFaceModel(const ModelConfig& config, uint64_t seed) : config_(config), module_(config) {
    recipe_ = InitializeWeights(*module_, config_, seed);
  }
  const ModelConfig& config() const override { return config_; }
  std::string init_recipe() const override { return recipe_; }
  std::unique_ptr<InputReversePass> PrepareReversePass(const torch::Tensor& e, int64_t target,
                                                       const ReversePassOptions& options) override {
    if (!HasReversePass()) return nullptr;  // Measured through autograd.
    return reverse::Prepare(ReverseStack(), e, target, options);
  }
  std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() override {
    return Named(*module_);
  }
  void To(const torch::Device& device, torch::Dtype dtype) override { module_->to(device, dtype); }

 protected:
  Module& module() { return module_; }
  // The module's weights for the hand-written reverse pass, where the family has one.
  virtual bool HasReversePass() const { return true; }
  virtual reverse::Stack ReverseStack() { return {}; }

 private:
  ModelConfig config_;
  Module module_;
  std::string recipe_;
};

}  // namespace posbias::models::layers
