// Architecture configuration of the model zoo: families, published presets, overrides, and the
// Hugging Face `config.json` reader. Torch-free, so registries and clients can use it.
//
// Families:
//  - gpt2   (GPT2LMHeadModel): learned absolute positions, pre-LayerNorm (eps 1e-5), fused QKV
//            stored as HF Conv1D ([in, out]), tanh-GELU, 4x MLP, final LayerNorm, tied output.
//  - qwen2  (Qwen2ForCausalLM): RMSNorm (eps 1e-6), rotary positions (theta), grouped-query
//            attention with q/k/v biases and no o-bias, SwiGLU MLP, final RMSNorm.
//  - llama  (LlamaForCausalLM): as qwen2 with optional q/k/v/o biases (attention_bias) and MLP
//            biases (mlp_bias), an explicit head_dim, and rope_scaling of type linear or llama3.
//  - mistral (MistralForCausalLM): llama without biases, plus sliding-window attention
//            (sliding_window = w: position i attends to i - w + 1 .. i, Hugging Face's mask).
//  - gpt_neox (GPTNeoXForCausalLM, Pythia): LayerNorm with bias, fused query_key_value in the
//            per-head layout [heads, 3, head_dim], rotary on the first rotary_pct of each head's
//            dimensions, exact-erf GELU MLP with biases, parallel (x + attn(ln1 x) + mlp(ln2 x)) or
//            sequential residual, untied embed_out.
//  - qwen3  (Qwen3ForCausalLM): llama's layout with q/k norms (an RMSNorm over head_dim on every
//            head of q and k, before the rotary) and per-layer sliding windows (layer_types).
//  - gemma  (GemmaForCausalLM): RMSNorm scaling by (1 + w), embeddings times sqrt(width) inside
//            the embedding, GeGLU (tanh GELU on the gate, or the erf one as hidden_act says),
//            tied output, explicit head_dim.
//  - gemma2 (Gemma2ForCausalLM): gemma with sandwich norms, the attention scale
//            query_pre_attn_scalar^-1/2, attention and final logit soft-capping, and sliding and
//            full layers alternating.
//  - gemma3_text (Gemma3ForCausalLM): gemma2's layout with (1 + w) q/k norms, no attention
//            soft-capping (its modeling file passes none), and two rotary bases
//            (rope_local_base_freq on sliding layers).
//  - phi3   (Phi3ForCausalLM): llama with fused qkv_proj and gate_up_proj, partial rotary, a
//            window on every layer and rope_scaling longrope.
//  - olmo2  (Olmo2ForCausalLM): norms after the attention and the MLP (on the branch, before the
//            residual add) and q/k norms over the whole projection.
//  - granite (GraniteForCausalLM): llama with embedding, attention, residual and logits multipliers.
//  - smollm3 (SmolLM3ForCausalLM): llama with NoPE layers (no_rope_layers) and per-layer windows.
//  - cesaro : no weights; each layer is h <- (1 - alpha) h + alpha * causal-mean(h) (THEORY.md s1).
//  - torchscript: a user's scripted module, forward(inputs_embeds [B, L, d]) -> hidden [B, L, d].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::models {

enum class Family {
  kGpt2, kQwen2, kCesaro, kTorchScript, kLlama, kMistral, kGptNeoX,
  kQwen3, kGemma, kGemma2, kGemma3, kPhi3, kOlmo2, kGranite, kSmolLm3,
};

// "gpt2", "qwen2", "cesaro", "torchscript", "llama", "mistral", "gpt_neox" (Hugging Face's model_type).
std::string FamilyName(Family family);
// The families a config builds (gpt2, qwen2, llama, mistral, gpt_neox, cesaro: not TorchScript), in
// one table with their names, so that flags and messages list them from it; and the same as
// "gpt2, qwen2, llama, mistral, gpt_neox or cesaro". Hugging Face's model_types are the built
// families but cesaro.
std::vector<std::string> BuiltFamilyNames();
std::string BuiltFamiliesText();
std::string HuggingFaceFamiliesText();
// The rotary families (every decoder row but gpt2's), and their names as "qwen2, llama, ...".
bool HasRotary(Family family);
std::string RotaryFamiliesText();

// Hugging Face's rope_scaling of the rotary frequencies: none, linear (every frequency divided by
// factor), llama3 (low frequencies divided by factor, high ones kept, a smooth ramp between,
// as transformers' _compute_llama3_parameters), or longrope (Phi-3: frequency i divided by
// short_factor[i], or by long_factor[i] when the sequence is longer than the original length, and
// cos and sin times an attention factor, as _compute_longrope_parameters).
struct RopeScaling {
  enum class Type { kNone, kLinear, kLlama3, kLongRope } type = Type::kNone;
  double factor = 1.0;
  double low_freq_factor = 1.0, high_freq_factor = 4.0;  // llama3.
  int64_t original_max_positions = 8192;                  // llama3, longrope: original_max_position_embeddings.
  std::vector<double> short_factor, long_factor;          // longrope: one per rotating frequency.
  double attention_factor = 0;                            // longrope: 0 = sqrt(1 + ln s / ln original).
};

// Which attention a layer runs (Hugging Face's layer_types).
enum class LayerAttention { kFull, kSliding };

// Switches that isolate one ingredient of the theory each.
struct Ablations {
  bool no_position_encoding = false;  // No learned positions (GPT-2) / no rotation (Qwen2).
  bool uniform_attention = false;     // Attention logits forced to 0: uniform causal averaging.
  bool no_mlp = false;                // MLP blocks removed (attention-only residual stream).
};

struct ModelConfig {
  Family family = Family::kGpt2;
  std::string preset;  // The preset it started from, if any.
  int64_t num_layers = 12;
  int64_t hidden_size = 768;
  int64_t num_heads = 12;
  int64_t num_kv_heads = 12;         // Qwen2 grouped-query attention; equals num_heads for GPT-2.
  int64_t intermediate_size = 3072;  // MLP width.
  int64_t vocab_size = 50257;
  int64_t max_positions = 1024;
  double norm_eps = 1e-5;            // LayerNorm (GPT-2) or RMSNorm (Qwen2) epsilon.
  double rope_theta = 1e6;           // The rotary families' base.
  bool tie_embeddings = true;        // Output projection shares the token embedding.
  double initializer_range = 0.02;   // Standard deviation of the normal init.
  double cesaro_alpha = 0.5;         // Cesaro family only.
  Ablations ablations;
  std::string torchscript_path;      // TorchScript family only.
  int64_t explicit_head_dim = 0;     // llama head_dim; 0 = hidden_size / num_heads.
  bool attention_bias = false;       // llama: q, k, v and o biases.
  bool mlp_bias = false;             // llama: gate, up and down biases.
  RopeScaling rope_scaling;          // llama, mistral, gpt_neox.
  int64_t sliding_window = 0;        // Attention window w of the sliding layers; 0 = full causal attention.
  double rotary_pct = 1.0;           // gpt_neox: share of each head's dimensions that rotate.
  bool parallel_residual = true;     // gpt_neox: use_parallel_residual.
  // Per-layer patterns, repeated when there are more layers than entries (an override of the
  // depth keeps the pattern): which layers slide (empty: every layer, when sliding_window > 0) and
  // which rotate (empty: every layer; smollm3's no_rope_layers).
  std::vector<LayerAttention> layer_types;
  std::vector<bool> rope_layers;
  double rope_local_theta = 0;        // gemma3_text: sliding layers' base (no scaling); 0 = rope_theta.
  double query_pre_attn_scalar = 0;   // gemma2, gemma3_text: the scale is its -1/2 power; 0 = head_dim.
  double attention_multiplier = 0;   // granite: the attention's scale; 0 = as above.
  double attn_logit_softcapping = 0;  // gemma2, gemma3_text: c tanh(S / c) on the scores; 0 = none.
  double final_logit_softcapping = 0; // gemma2, gemma3_text: c tanh(z / c) on the logits; 0 = none.
  double embedding_multiplier = 1;    // granite: on the embeddings inside the model.
  double residual_multiplier = 1;     // granite: on each branch before the residual add.
  double logits_scaling = 1;          // granite: the logits are divided by it.
  bool exact_gelu = false;            // gemma*: hidden_act(ivation) "gelu", the erf GELU on the gate.

  int64_t head_dim() const { return explicit_head_dim > 0 ? explicit_head_dim : hidden_size / num_heads; }
  // The rotating dimensions of a head, int(head_dim * rotary_pct): head_dim but for gpt_neox, the
  // one family whose config.json reader sets rotary_pct (architecture.h: partial_rotary).
  int64_t rotary_dims() const { return static_cast<int64_t>(static_cast<double>(head_dim()) * rotary_pct); }
  // Layer l's window (0: full causal attention) and whether it rotates (before ablations).
  int64_t WindowOf(int64_t layer) const;
  bool RotatesAt(int64_t layer) const;
  // The attention's scale: attention_multiplier, else query_pre_attn_scalar^-1/2, else head_dim^-1/2.
  double AttentionScale() const;
};

// The factor on the rotary cos and sin: longrope's attention factor (the config's, else
// transformers' sqrt(1 + ln factor / ln original) when the factor exceeds 1), else 1.
double RotaryScaleOf(const ModelConfig& config);

// Field overrides on top of a preset (flags of posbias-measure, RegisterModel overrides).
struct ConfigOverrides {
  std::optional<int64_t> num_layers, hidden_size, num_heads, num_kv_heads, intermediate_size,
      vocab_size, max_positions;
  std::optional<double> rope_theta, cesaro_alpha, initializer_range;
  std::optional<bool> tie_embeddings;
  std::optional<int64_t> sliding_window;  // mistral.
  // A head's width (llama's explicit head_dim). Unset while the width or the heads are overridden:
  // hidden_size / num_heads again (not the preset's explicit value, which would make the heads'
  // inner width differ from the width asked for).
  std::optional<int64_t> head_dim;
};

std::vector<std::string> PresetNames();
// gpt2, gpt2-medium, gpt2-large, gpt2-xl, qwen2-0.5b, qwen2-1.5b, llama3.2-1b, tinyllama-1.1b,
// mistral-7b, pythia-70m, pythia-160m, pythia-410m, pythia-1b, the *-tiny test shapes, cesaro.
absl::StatusOr<ModelConfig> PresetConfig(const std::string& name);
// The family's published base shape: "gpt2" -> gpt2 preset, "qwen2" -> qwen2-0.5b, "llama" ->
// llama3.2-1b, "mistral" -> mistral-7b, "gpt_neox" -> pythia-160m, "cesaro".
absl::StatusOr<ModelConfig> FamilyConfig(const std::string& family);

ModelConfig ApplyOverrides(ModelConfig config, const ConfigOverrides& overrides);

// What posbias-train and posbias-measure build from a family's base shape or a preset and their
// shape flags: ApplyOverrides, and where the width or the heads are given, the rest of a small
// shape derived from them instead of kept from the large model, unless given too: the MLP width
// keeps the base's ratio to the width (Llama-3.2-1B's 4, Qwen2's 4864 / 896); the key/value heads
// keep the base's group size where it divides the heads, else equal the heads; a long-context
// rope scaling (llama3, longrope, linear) is dropped and the positions capped at its original
// length. So `--arch llama --width 64 --heads 4` is a 4-head, MLP-256 model of 8,192 positions,
// not Llama-3.2-1B's MLP of 8,192 on a width of 64.
ModelConfig ApplyShapeOverrides(const ModelConfig& base, const ConfigOverrides& overrides);

// One line: "llama: 2 layers, width 64, 4 heads (1 key/value), MLP 256, vocabulary 257, 8,192
// positions, rope theta 5e+05: 0.14 M parameters" (what the two tools print before they work).
std::string ShapeSummary(const ModelConfig& config);

// INVALID_ARGUMENT naming the field when the shape is inconsistent (heads must divide the width,
// kv heads must divide heads, Qwen2 head_dim even, positive sizes, ...).
absl::Status ValidateConfig(const ModelConfig& config);
// The part of ValidateConfig that bounds what a config makes anyone allocate (depth, widths,
// heads, vocabulary, positions): checked before any per-layer list is built from it.
absl::Status ValidateDimensions(const ModelConfig& config);

// Parameters a model of this config has (exact up to biases and norms; 0 for TorchScript): what
// a registration would load, checked against the host before anything is built.
double EstimatedParameters(const ModelConfig& config);

// Activations one layer keeps for autograd's backward pass of one sequence of `length` positions,
// in elements (a generous estimate): the residual-stream and MLP-width tensors, L (12 d + 3 m), and
// the attention scores and probabilities, 2 heads L^2 (these dominate at long L).
double ActivationElementsPerLayer(const ModelConfig& config, int64_t length);

// Whether the family has the hand-written reverse pass (models/reverse_pass.h): every decoder
// family; TorchScript and the Cesaro routing model go through autograd.
bool HasOwnReversePass(Family family);

// What the own reverse pass keeps per layer for one sequence, in elements, counted from its saved
// tensors: the layer's input and two norms' normalized inputs (3 d), q and the attention's output
// (2 heads hd), k and v (2 kv_heads hd), one log-sum-exp per query and head, the norms' scales
// and the MLP's derivatives (m for GELU, 2 m for SwiGLU): linear in L (attention runs in blocks).
// With ActivationElementsPerLayer, the memory formulas both job admission and the Jacobian
// engine's batch plan are built on.
double ReversePassElementsPerLayer(const ModelConfig& config, int64_t length);
// What one cotangent row holds at the peak of a layer's reverse pass, in elements per position,
// times L: the largest of its phases, each counted from the tensors alive in it (reverse_pass.cc):
// the attention's (the gradient in and on its output, dO and dQ at heads hd, dK and dV at
// kv_heads hd, the rotary transpose's two temporaries, the q/k norms' copies of dq and dk), the
// MLP's (its width once for GELU, twice for gated MLPs, beside two rows at d, three with post
// norms) and the norms' (six at d).
double ReversePassElementsPerRow(const ModelConfig& config, int64_t length);

// Reads a Hugging Face config.json (model_type: HuggingFaceFamiliesText()). A key
// that changes the computation and is not built (rope_scaling yarn/dynamic/..., logit
// soft-capping, another hidden_act, qwen2's use_sliding_window) is UNIMPLEMENTED naming the key and
// the supported values; an unknown model_type is INVALID_MODEL_FILE listing the families.
absl::StatusOr<ModelConfig> ConfigFromHuggingFaceJson(const std::string& json_text);
// Writes the config as Hugging Face config.json text (so exported weights load in PyTorch).
std::string ConfigToHuggingFaceJson(const ModelConfig& config);

}  // namespace posbias::models
