// The family table's decoder rows: how each built decoder family (GPT-2, Qwen2, Llama, Mistral,
// GPT-NeoX, Qwen3, Gemma 1/2/3, Phi-3, OLMo 2, Granite, SmolLM3) is assembled from shared parts, as data. The one decoder (decoder.cc) builds every
// family from its row, its reverse pass reads the same row, and the config checks (which settings
// a family has, config.cc) read it too: a new family is a new row plus its config.json reader.
// Torch-free, like config.h (llama.cpp's architecture table of tensor names, vLLM's registry).
#pragma once

#include <string>

#include "server/models/config.h"

namespace posbias::models {

struct Architecture {
  // kRmsNormOnePlus: RMSNorm scaling by (1 + w), its weight initialized at 0 (Gemma).
  enum class Norm { kLayerNorm, kRmsNorm, kRmsNormOnePlus };
  // Norms of q and k (the family's norm kind, the model's eps): none, an RMSNorm over head_dim on
  // every head (Qwen3, Gemma 3), or over the whole projection before the split into heads (OLMo 2).
  enum class QkNorm { kNone, kPerHead, kWholeProjection };
  // The embeddings' scale: none, sqrt(width) applied by the embedding itself (Gemma 1/2/3's
  // scaled word embedding: the Jacobian's input is the scaled embedding), or the config's
  // embedding_multiplier applied by the body to its input (Granite: the input is unscaled).
  enum class EmbeddingScale { kNone, kSqrtWidthInEmbedding, kMultiplierInBody };
  // How q, k, v and the output projection are stored.
  enum class AttentionLayout {
    kSeparate,      // names.q, k, v, o: four projections (grouped-query heads possible).
    kFusedColumns,  // names.q: one projection to [q | k | v] columns (GPT-2's c_attn, Phi-3's qkv_proj); names.o.
    kFusedPerHead,  // names.q: one projection to [heads, (q, k, v), head_dim] (GPT-NeoX); names.o.
  };
  enum class Mlp {
    kGeluTanh,  // out(gelu_tanh(in x)) (GPT-2's gelu_new).
    kGeluErf,   // out(gelu(in x)), the exact erf GELU (GPT-NeoX).
    kSwiGlu,    // out(silu(gate x) * in x) (Qwen2, Llama, Mistral).
    kGeGluTanh, // out(gelu_tanh(gate x) * in x) (Gemma's gelu_pytorch_tanh; the config's
                // exact_gelu: the erf GELU).
  };
  enum class Positions { kLearned, kRotary };
  // Whether a projection has a bias: never, always, or as the config's attention_bias / mlp_bias.
  enum class Bias { kNone, kAlways, kAttentionBias, kMlpBias };

  // Hugging Face's tensor names. A model's parameters are <body>.<token_embedding>.weight,
  // <body>.<layers>.<l>.<norm1>.weight, <body>.<layers>.<l>.<attention>.<q>.weight, ..., and
  // <head>.weight beside the body. Unused slots are nullptr.
  struct Names {
    const char* body;
    const char* token_embedding;
    const char* position_embedding;  // kLearned only.
    const char* layers;
    const char* final_norm;
    const char* head;  // nullptr: the output always reuses the token embedding.
    const char* norm1;  // Before the attention; nullptr: none (OLMo 2).
    const char* attention;
    const char* norm2;  // Before the MLP; nullptr: none (OLMo 2).
    const char* mlp;
    const char* q;  // The fused projection for the fused layouts.
    const char* k;
    const char* v;
    const char* o;
    const char* mlp_in;    // GELU: the first projection; gated: up_proj (nullptr when fused).
    const char* mlp_gate;  // Gated only; fused_gate_up: the one projection to [gate | up] rows.
    const char* mlp_out;
    // Norms of the attention's and the MLP's output before the residual add (Gemma 2's sandwich,
    // OLMo 2), and of q and k; nullptr: none.
    const char* post_attention_norm = nullptr;
    const char* post_mlp_norm = nullptr;
    const char* q_norm = nullptr;
    const char* k_norm = nullptr;
  };

  Norm norm;
  AttentionLayout attention;
  Mlp mlp;
  Positions positions;
  Bias qkv_bias, o_bias, mlp_bias;
  bool conv1d;                   // Projections stored [in, out] (Hugging Face Conv1D), else [out, in].
  bool grouped_query;            // kv heads may be fewer than heads.
  bool explicit_head_dim;        // config.json may set head_dim (else width / heads).
  bool rope_scaling;             // rope_scaling linear / llama3 is read.
  bool partial_rotary;           // rotary_pct: only the first dimensions of a head rotate.
  bool sliding_window;           // sliding_window is read.
  bool parallel_residual;        // use_parallel_residual is read (else always sequential).
  bool mlp_width_follows_width;  // Overriding the width sets the MLP width to 4 x width (GPT-2).
  bool scaled_residual_init;     // o and mlp_out weights at range / sqrt(2 H) (GPT-2's c_proj).
  // Registration order and presence, so that parameters keep Hugging Face's order (the seeded
  // initialization draws in it) and exports keep every tensor: GPT-NeoX registers norm2 before the
  // attention and keeps the MLP's weights when the MLP is ablated.
  bool norm2_before_attention;
  bool mlp_kept_without_mlp;
  Names names;
  QkNorm qk_norm = QkNorm::kNone;
  EmbeddingScale embedding_scale = EmbeddingScale::kNone;
  bool fused_gate_up = false;     // names.mlp_gate: [gate | up] rows (Phi-3's gate_up_proj).
  // What config.json may set beyond the columns above (ValidateConfig refuses it elsewhere):
  bool layer_types = false;       // Per-layer sliding and full attention.
  bool nope_layers = false;       // Layers without rotary (no_rope_layers).
  bool local_rope_base = false;   // rope_local_base_freq on sliding layers.
  bool soft_capping = false;      // attn_logit_softcapping, final_logit_softcapping, query_pre_attn_scalar.
  bool multipliers = false;       // embedding, attention, residual multipliers and logits_scaling.
  bool long_rope = false;         // rope_scaling longrope.
};

// The row of a built decoder family; nullptr for the Cesaro routing model and TorchScript, which
// are no such decoder.
const Architecture* ArchitectureOf(Family family);

// The families whose row says yes, as "llama, mistral and gpt_neox" (for refusals).
std::string FamiliesWhere(bool Architecture::*setting);

// Whether the MLP multiplies an activated gate by an up projection (SwiGLU, GeGLU).
bool IsGated(Architecture::Mlp mlp);

// Whether a projection of `rule` has a bias under `config`.
bool HasBias(Architecture::Bias rule, const ModelConfig& config);

}  // namespace posbias::models
