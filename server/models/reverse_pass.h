// The hand-written batched reverse pass of every decoder family (every row of the family table,
// architecture.h; private to the room; models reach it through DecoderModel::PrepareReversePass).
//
// A decoder layer is described by its weights as plain tensors, each linear map by the matrix B
// of its reverse pass (dx = dy B, [out, in]; the forward pass is y = x B^T + b). One forward pass
// of one sequence keeps, per layer, what the reverse pass needs: normalized inputs and inverse
// scales, rotated queries and keys, values, the attention's output and one log-sum-exp per query
// and head, and the MLP's activation derivatives: O(L) per layer. Attention runs in blocks of
// queries x keys in both passes (THEORY §10, FlashAttention-2's schedule): the forward keeps a
// running maximum and sum per query; the reverse recomputes each block's probabilities
// P = exp(S - lse) once for all K cotangent rows, with D_i = dO_i . O_i, and adds dV = P^T dO,
// dS = P (dO V^T - D), dQ = dS K, dK = dS^T Q. Blocks above the diagonal, or wholly outside a
// sliding window, are skipped (a window w costs O(L w)); grouped-query heads share their key and
// value block without repeating it. The reverse pass of K cotangents then runs every product as one [K L, .] matrix
// product with those activations broadcast over the K rows (in groups of rows_per_product), all
// rows through one layer before the next. For many rows (exact norms, K = d) the MLP branch goes
// through its per-position Jacobians instead (d x d each, formed once per layer: d^2 m work per
// position instead of 2 d m or 3 d m per row and position). The layer where the cotangents enter
// works on the target row only (MLP, queries): the other rows of its output do not reach it.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <torch/types.h>

#include "server/models/model.h"

namespace posbias::models::reverse {

// y = x back^T + bias; dx = dy back.
struct Linear {
  torch::Tensor back;  // [out, in]
  torch::Tensor bias;  // [out] or undefined.
};

// An undefined weight: no norm (the identity), as where a family has none.
struct Norm {
  enum class Kind { kLayerNorm, kRmsNorm } kind = Kind::kLayerNorm;
  torch::Tensor weight, bias;  // bias: LayerNorm only. Gemma's (1 + w) norms give 1 + w here.
  double eps = 1e-5;
  bool present() const { return weight.defined(); }
};

struct Attention {
  Linear q, k, v, o;
  int64_t heads = 1, kv_heads = 1;
  // RMSNorms of the projected q and k (before the rotary): over each head's head_dim when
  // qk_norm_per_head (Qwen3, Gemma 3), else over the whole projection (OLMo 2); absent: none.
  Norm q_norm, k_norm;
  bool qk_norm_per_head = true;
  double scale = 0;         // The scores' scale; 0 = head_dim^-1/2.
  double softcap = 0;       // > 0: scores c tanh(S / c) (Gemma 2's attn_logit_softcapping).
  double rotary_scale = 1;  // cos and sin times this (longrope's attention factor).
  // Rotary position embedding on the first rotary_dims of every head's q and k, with the family's
  // inverse frequencies [rotary_dims / 2] (rope_theta and rope_scaling applied); undefined = none.
  torch::Tensor rotary_inv_freq;
  int64_t rotary_dims = 0;
  int64_t window = 0;       // > 0: position i attends to keys i - window + 1 .. i (Mistral).
  bool uniform = false;     // Logits forced to zero: uniform causal averaging.
};

struct Mlp {
  // GELU with tanh (GPT-2's gelu_new), exact-erf GELU (GPT-NeoX), SwiGLU (Qwen2, Llama), GeGLU
  // with the tanh or the erf GELU on the gate (Gemma).
  enum class Kind { kGeluTanh, kGeluErf, kSwiGlu, kGeGluTanh, kGeGluErf } kind = Kind::kGeluTanh;
  Linear in;    // GELU: c_fc. Gated: up_proj.
  Linear gate;  // Gated only: gate_proj.
  Linear out;   // c_proj / down_proj.
};

// h = x + r post1(attention(norm1 x)); out = h + r post2(mlp(norm2 h)), each norm possibly absent
// (Gemma 2's sandwich has all four, OLMo 2 only the post norms, the others only the pre norms).
struct Layer {
  Norm norm1;
  Attention attention;
  Norm post_attention_norm;
  bool has_mlp = true;
  Norm norm2;
  Mlp mlp;
  Norm post_mlp_norm;
  double residual_multiplier = 1;  // r (Granite).
  // x + attention(norm1 x) + mlp(norm2 x) (GPT-NeoX's use_parallel_residual); else sequential.
  bool parallel_residual = false;
};

struct Stack {
  std::vector<Layer> layers;
  Norm final_norm;
  double input_scale = 1;  // The body scales its input by this (Gemma's sqrt(width), Granite).
};

// How BlockedCausalAttention runs.
struct BlockedAttentionOptions {
  bool uniform = false;                    // Average the visible keys (no scores).
  int64_t window = 0;                      // > 0: keys at or before i - window are hidden.
  double scale = 0;                        // The scores' scale; 0 = head_dim^-1/2.
  double softcap = 0;                      // > 0: scores c tanh(S / c).
  int64_t block = kDefaultAttentionBlock;  // Query and key positions per block.
  torch::Tensor* lse = nullptr;            // When given: each query's log-sum-exp [kvH, G, L] (stats dtype).
  // When given: called after every kBlocksPerHeartbeat block pairs; false stops the attention.
  const std::function<bool()>* between_blocks = nullptr;
};

// Causal attention in blocks of options.block queries x keys with a running log-sum-exp (no
// [L, L] scores): queries q [kvH, G, L, hd] (query head kv * G + g reads key/value head kv), keys
// and values [kvH, L, hd]. Returns the output [kvH, G, L, hd], or an undefined tensor when
// between_blocks stopped it. Uniform attention averages the visible keys (a running mean without
// a window).
torch::Tensor BlockedCausalAttention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                     const BlockedAttentionOptions& options);

// Runs the forward pass of inputs_embeds [1, L, d] up to the 1-based target and returns the
// prepared reverse pass.
std::unique_ptr<InputReversePass> Prepare(Stack stack, const torch::Tensor& inputs_embeds, int64_t target,
                                          const ReversePassOptions& options);

}  // namespace posbias::models::reverse
