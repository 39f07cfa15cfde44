// The family table's decoder rows: how each built decoder family (GPT-2, Qwen2, Llama, Mistral,
// GPT-NeoX) is assembled from shared parts, as data. The one decoder (decoder.cc) builds every
// family from its row, its reverse pass reads the same row, and the config checks (which settings
// a family has, config.cc) read it too: a new family is a new row plus its config.json reader.
// Torch-free, like config.h (llama.cpp's architecture table of tensor names, vLLM's registry).
#pragma once

#include <string>

#include "server/models/config.h"

namespace posbias::models {

struct Architecture {
  enum class Norm { kLayerNorm, kRmsNorm };
  // How q, k, v and the output projection are stored.
  enum class AttentionLayout {
    kSeparate,      // names.q, k, v, o: four projections (grouped-query heads possible).
    kFusedColumns,  // names.q: one projection to [q | k | v] columns (GPT-2's c_attn); names.o.
    kFusedPerHead,  // names.q: one projection to [heads, (q, k, v), head_dim] (GPT-NeoX); names.o.
  };
  enum class Mlp {
    kGeluTanh,  // out(gelu_tanh(in x)) (GPT-2's gelu_new).
    kGeluErf,   // out(gelu(in x)), the exact erf GELU (GPT-NeoX).
    kSwiGlu,    // out(silu(gate x) * in x) (Qwen2, Llama, Mistral).
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
    const char* norm1;
    const char* attention;
    const char* norm2;
    const char* mlp;
    const char* q;  // The fused projection for the fused layouts.
    const char* k;
    const char* v;
    const char* o;
    const char* mlp_in;    // GELU: the first projection; SwiGLU: up_proj.
    const char* mlp_gate;  // SwiGLU only.
    const char* mlp_out;
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
};

// The row of a built decoder family; nullptr for the Cesaro routing model and TorchScript, which
// are no such decoder.
const Architecture* ArchitectureOf(Family family);

// The families whose row says yes, as "llama, mistral and gpt_neox" (for refusals).
std::string FamiliesWhere(bool Architecture::*setting);

// Whether a projection of `rule` has a bias under `config`.
bool HasBias(Architecture::Bias rule, const ModelConfig& config);

}  // namespace posbias::models
