// The model zoo's one door for the Jacobian engine: a decoder seen from its input embeddings.
//
// Every family (GPT-2, Qwen2, Cesaro routing, TorchScript) implements DecoderModel. Parameters are
// named exactly as in Hugging Face checkpoints, so weights load and export unmodified. Models are
// built at a seeded random initialization (the Hugging Face recipes) or from a checkpoint.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/types.h>

#include "absl/status/statusor.h"
#include "server/files/open_beneath.h"
#include "server/models/config.h"
#include "server/models/schedule.h"

namespace posbias::models {

struct ForwardOptions {
  bool record_layers = false;         // Keep the residual stream after every layer.
  bool record_branch_ratios = false;  // Measure ||attn|| / (||residual|| + ||attn||) per layer.
  // Activation checkpointing: keep only each layer's input and recompute the layer during the
  // backward pass (memory O(L d) per layer instead of O(L^2 heads)). Gradients then reach the
  // inputs only, not the parameters (the Jacobian engine freezes them anyway).
  bool checkpoint_layers = false;
  // The value pathway only (THEORY.md section 6; MeasureOptions::pathway): the attention
  // probabilities P = softmax(q k^T / sqrt(hd) + mask) are detached, so gradients reach the inputs
  // through the values P^T dO, the residual stream and the MLP, never through the scores. The
  // forward values are unchanged.
  bool detach_attention_probabilities = false;
};

struct ForwardOutput {
  torch::Tensor hidden;              // [B, L, d] after the final norm.
  std::vector<torch::Tensor> layers; // [B, L, d] residual stream after layer l = 1..H.
  std::vector<double> branch_ratio;  // Per layer, mean over batch and positions.
};

// A model's own reverse pass with respect to its input embeddings, batched over cotangents.
// Prepared for one sequence (one forward pass whose activations every cotangent shares), it maps
// K cotangents on one output at the target position to the K gradients w.r.t. all L input
// embeddings. Parameters are frozen, so only input gradients are computed, through known layers:
// no autograd graph, no K-fold copies of the activations, and the top layer only at the target.
struct ReversePassOptions {
  // false: keep only each layer's input and recompute its activations in every call (long L).
  bool keep_activations = true;
  // Query and key positions per block of the forward pass's attention (reverse_pass.h: attention
  // in blocks with a running log-sum-exp, O(L) memory per layer); 0 = kDefaultAttentionBlock. The
  // measurement passes the planner's (jacobian::BatchPlan::blocks, schedule.h).
  int64_t attention_block = 0;
  // Called between groups of attention blocks of the forward pass (at long L one layer's forward
  // takes seconds); returning false stops it: the pass is then Stopped() and computes nothing.
  std::function<bool()> between_blocks;
};

// How one InputGradients call runs (all cotangent rows go through a layer before the next).
struct GradientOptions {
  // Rows of cotangents per matrix product (bounds memory and keeps products cache-friendly);
  // 0 = all rows at once.
  int64_t rows_per_product = 0;
  // The MLP branch through its per-position Jacobians C_i (d x d, formed once per layer and
  // call: d^2 m work per position) instead of K row products (2 d m or 3 d m each): kAuto uses
  // them where they are cheaper, i.e. for many rows such as exact norms (K = d).
  enum class MlpJacobians { kAuto, kOn, kOff } mlp_jacobians = MlpJacobians::kAuto;
  // Called after each layer; returning false stops the call (it then returns an undefined tensor).
  std::function<bool()> between_layers;
  // Called after each query block of an attention's reverse pass (many per layer at long L), and
  // after every kBlocksPerHeartbeat key blocks within one; returning false stops the call as
  // between_layers does.
  std::function<bool()> between_blocks;
  // Positions per query and key block of the attention's reverse pass; 0 = the CPU's rule
  // (schedule.h, CpuReverseAttentionBlock). The measurement passes the planner's.
  int64_t attention_block = 0;
  // The value pathway only, as ForwardOptions::detach_attention_probabilities: each attention's
  // reverse pass keeps dV = P^T dO and drops the score branch (dP, hence dq and dk). One prepared
  // pass serves both pathways.
  bool detach_attention_probabilities = false;
};

class InputReversePass {
 public:
  // The output after the final norm (`layer` argument of InputGradients).
  static constexpr int64_t kFinalHidden = 0;
  virtual ~InputReversePass() = default;
  // cotangents [K, d] on the output at the target position: kFinalHidden, or the residual stream
  // after layer 1..H. Returns [K, L, d] (zero beyond the target, by causality).
  virtual torch::Tensor InputGradients(const torch::Tensor& cotangents, int64_t layer,
                                       const GradientOptions& options) = 0;
  torch::Tensor InputGradients(const torch::Tensor& cotangents, int64_t layer) {
    return InputGradients(cotangents, layer, GradientOptions{});
  }
  // Cotangents [K, T, d] on the final hidden states of every position 1..T (T = the target): the
  // gradients [K, L, d] of an output that reads all of them, such as the next-token loss over the
  // sequence. The same pass as InputGradients with the cotangents entering every row of the top
  // layer: memory linear in L (one row's tensors over all positions, attention in blocks).
  virtual torch::Tensor SequenceInputGradients(const torch::Tensor& cotangents, const GradientOptions& options) = 0;
  // The final hidden state [d] at the target position (for outputs computed from it).
  virtual torch::Tensor FinalHidden() const = 0;
  // The final hidden states [T, d] of positions 1..T.
  virtual torch::Tensor FinalHiddenStates() const = 0;
  // Whether ReversePassOptions::between_blocks stopped the forward pass (nothing else is valid).
  virtual bool Stopped() const { return false; }
};

class DecoderModel {
 public:
  virtual ~DecoderModel() = default;
  virtual const ModelConfig& config() const = 0;
  // The initialization recipe, in words (recorded with every measurement).
  virtual std::string init_recipe() const = 0;
  // Input embeddings e_j of token ids [B, L]: the token embedding, plus the learned absolute
  // position embedding where the architecture adds one (GPT-2 with positions on).
  virtual torch::Tensor Embed(const torch::Tensor& token_ids) = 0;
  virtual ForwardOutput Forward(const torch::Tensor& inputs_embeds, const ForwardOptions& options) = 0;
  // Logits [B, L, V] from final hidden states.
  virtual torch::Tensor Logits(const torch::Tensor& hidden) = 0;
  // Parameters by Hugging Face name (tied weights appear once).
  virtual std::vector<std::pair<std::string, torch::Tensor>> NamedParameters() = 0;
  // Moves parameters to a device and floating dtype.
  virtual void To(const torch::Device& device, torch::Dtype dtype) = 0;
  virtual bool has_token_embedding() const { return true; }
  // Whether Embed adds learned position embeddings (the Jacobian is then w.r.t. their sum).
  virtual bool embeds_positions() const { return false; }
  // The model's own reverse pass for one sequence inputs_embeds [1, L, d] and a 1-based target
  // position, or nullptr where the model has none (TorchScript, Cesaro): callers then use autograd.
  virtual std::unique_ptr<InputReversePass> PrepareReversePass(const torch::Tensor& inputs_embeds,
                                                               int64_t target,
                                                               const ReversePassOptions& options) {
    (void)inputs_embeds, (void)target, (void)options;
    return nullptr;
  }
};

// A model of the config's family at a seeded random initialization (deterministic per seed).
absl::StatusOr<std::unique_ptr<DecoderModel>> BuildModel(const ModelConfig& config, uint64_t seed);

// A TorchScript module with forward(inputs_embeds [B, L, d]) -> hidden [B, L, d], its file read
// beneath `scope` (files/open_beneath.h; anywhere by default).
absl::StatusOr<std::unique_ptr<DecoderModel>> LoadTorchScriptModel(const std::string& path,
                                                                   int64_t hidden_size,
                                                                   const files::Scope& scope = {});

// Number of parameters.
int64_t ParameterCount(DecoderModel& model);

}  // namespace posbias::models
