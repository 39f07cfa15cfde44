// Architecture configuration of the model zoo: families, published presets, overrides, and the
// Hugging Face `config.json` reader. Torch-free, so registries and clients can use it.
//
// Families:
//  - gpt2   (GPT2LMHeadModel): learned absolute positions, pre-LayerNorm (eps 1e-5), fused QKV
//            stored as HF Conv1D ([in, out]), tanh-GELU, 4x MLP, final LayerNorm, tied output.
//  - qwen2  (Qwen2ForCausalLM): RMSNorm (eps 1e-6), rotary positions (theta), grouped-query
//            attention with q/k/v biases and no o-bias, SwiGLU MLP, final RMSNorm.
//  - cesaro : no weights; each layer is h <- (1 - alpha) h + alpha * causal-mean(h) (THEORY.md s1).
//  - torchscript: a user's scripted module, forward(inputs_embeds [B, L, d]) -> hidden [B, L, d].
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::models {

enum class Family { kGpt2, kQwen2, kCesaro, kTorchScript };

std::string FamilyName(Family family);  // "gpt2", "qwen2", "cesaro", "torchscript"

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
  double rope_theta = 1e6;           // Qwen2 only.
  bool tie_embeddings = true;        // Output projection shares the token embedding.
  double initializer_range = 0.02;   // Standard deviation of the normal init.
  double cesaro_alpha = 0.5;         // Cesaro family only.
  Ablations ablations;
  std::string torchscript_path;      // TorchScript family only.

  int64_t head_dim() const { return hidden_size / num_heads; }
};

// Field overrides on top of a preset (flags of posbias-measure, RegisterModel overrides).
struct ConfigOverrides {
  std::optional<int64_t> num_layers, hidden_size, num_heads, num_kv_heads, intermediate_size,
      vocab_size, max_positions;
  std::optional<double> rope_theta, cesaro_alpha, initializer_range;
  std::optional<bool> tie_embeddings;
};

std::vector<std::string> PresetNames();
// gpt2, gpt2-medium, gpt2-large, gpt2-xl, qwen2-0.5b, qwen2-1.5b, gpt2-tiny, qwen2-tiny, cesaro.
absl::StatusOr<ModelConfig> PresetConfig(const std::string& name);
// The family's published base shape: "gpt2" -> gpt2 preset, "qwen2" -> qwen2-0.5b, "cesaro".
absl::StatusOr<ModelConfig> FamilyConfig(const std::string& family);

ModelConfig ApplyOverrides(ModelConfig config, const ConfigOverrides& overrides);

// INVALID_ARGUMENT naming the field when the shape is inconsistent (heads must divide the width,
// kv heads must divide heads, Qwen2 head_dim even, positive sizes, ...).
absl::Status ValidateConfig(const ModelConfig& config);

// Parameters a model of this config has (exact up to biases and norms; 0 for TorchScript): what
// a registration would load, checked against the host before anything is built.
double EstimatedParameters(const ModelConfig& config);

// Activations one layer keeps for the backward pass of one sequence of `length` positions, in
// elements (a generous estimate): the residual-stream and MLP-width tensors, L (12 d + 3 m), and
// the attention scores and probabilities, 2 heads L^2 (these dominate at long L). The one memory
// formula both job admission and the Jacobian engine's batch budget are built on.
double ActivationElementsPerLayer(const ModelConfig& config, int64_t length);

// Reads a Hugging Face config.json (model_type "gpt2" or "qwen2").
absl::StatusOr<ModelConfig> ConfigFromHuggingFaceJson(const std::string& json_text);
// Writes the config as Hugging Face config.json text (so exported weights load in PyTorch).
std::string ConfigToHuggingFaceJson(const ModelConfig& config);

}  // namespace posbias::models
