// The sizes a config implies, before any tensor exists: parameters, and the elements the forward
// pass and the model's own reverse pass keep per layer and per row (the memory model's terms).
#include <algorithm>
#include <cmath>

#include "server/models/architecture.h"
#include "server/models/config.h"

namespace posbias::models {

double EstimatedParameters(const ModelConfig& config) {
  const double d = static_cast<double>(config.hidden_size), m = static_cast<double>(config.intermediate_size);
  const double vocab = static_cast<double>(config.vocab_size), layers = static_cast<double>(config.num_layers);
  if (config.family == Family::kCesaro) return vocab * d;
  const Architecture* a = ArchitectureOf(config.family);
  if (a == nullptr) return 0;  // TorchScript: not known before loading.
  // The one decoder's parameters (decoder.cc), counted from the family's row.
  const double head_dim =
      config.explicit_head_dim > 0 || config.num_heads > 0 ? static_cast<double>(config.head_dim()) : 0.0;
  const double q = static_cast<double>(config.num_heads) * head_dim;
  const double kv = static_cast<double>(config.num_kv_heads) * head_dim;
  const double norm = a->norm == Architecture::Norm::kLayerNorm ? 2 * d : d;
  const auto bias = [&config](Architecture::Bias rule, double size) { return HasBias(rule, config) ? size : 0.0; };
  double norms = 0;
  for (const char* name : {a->names.norm1, a->names.norm2, a->names.post_attention_norm, a->names.post_mlp_norm}) {
    if (name != nullptr) norms += norm;
  }
  if (a->qk_norm == Architecture::QkNorm::kPerHead) norms += 2 * head_dim;
  if (a->qk_norm == Architecture::QkNorm::kWholeProjection) norms += q + kv;
  double layer = norms + d * (q + 2 * kv) + bias(a->qkv_bias, q + 2 * kv) + q * d + bias(a->o_bias, d);
  const double mlp_projections = IsGated(a->mlp) ? 3 : 2;
  layer += mlp_projections * d * m + bias(a->mlp_bias, (mlp_projections - 1) * m + d);
  const double positions = a->positions == Architecture::Positions::kLearned ? static_cast<double>(config.max_positions) : 0;
  const bool separate_head = a->names.head != nullptr && !config.tie_embeddings;
  return layers * layer + (vocab + positions) * d + (separate_head ? vocab * d : 0) + norm;
}

bool HasOwnReversePass(Family family) { return ArchitectureOf(family) != nullptr; }

namespace {

// Widths of the decoder's parts: d, the MLP width (twice for SwiGLU's two derivatives), and the
// query and key/value widths heads hd and kv_heads hd.
struct Widths {
  double d = 0, mlp = 0, q = 0, kv = 0, heads = 0;
  double norms = 2;  // Normalized inputs kept per position, in units of d (two pre norms)...
  double qk_norms = 0;  // ... and of the q/k norms, in elements.
  bool post_norms = false;  // Norms on a branch's output (Gemma 2/3's sandwich, OLMo 2).
  bool rotary = false;
};
Widths WidthsOf(const ModelConfig& config) {
  Widths w;
  w.d = static_cast<double>(config.hidden_size);
  const Architecture* a = ArchitectureOf(config.family);
  const bool swiglu = a != nullptr && IsGated(a->mlp);
  w.mlp = static_cast<double>(config.intermediate_size) * (swiglu ? 2.0 : 1.0);
  const double head_dim = config.explicit_head_dim > 0 || config.num_heads > 0 ? static_cast<double>(config.head_dim()) : 0.0;
  w.q = static_cast<double>(config.num_heads) * head_dim;
  w.kv = static_cast<double>(config.num_kv_heads) * head_dim;
  w.heads = static_cast<double>(config.num_heads);
  w.rotary = HasRotary(config.family) && !config.ablations.no_position_encoding;
  if (a != nullptr) {
    w.norms = 0;
    for (const char* name : {a->names.norm1, a->names.norm2, a->names.post_attention_norm, a->names.post_mlp_norm}) {
      if (name != nullptr) w.norms += 1;
    }
    if (a->qk_norm != Architecture::QkNorm::kNone) w.qk_norms = w.q + w.kv;
    w.post_norms = a->names.post_attention_norm != nullptr || a->names.post_mlp_norm != nullptr;
  }
  return w;
}

}  // namespace

double ReversePassElementsPerLayer(const ModelConfig& config, int64_t length) {
  const Widths w = WidthsOf(config);
  return static_cast<double>(length) * ((1.0 + w.norms) * w.d + w.qk_norms + 2.0 * w.q + 2.0 * w.kv + w.mlp + w.heads + 2.0);
}

double ReversePassElementsPerRow(const ModelConfig& config, int64_t length) {
  const Widths w = WidthsOf(config);
  double attention = std::max(2.0 * w.q + 2.0 * w.kv, w.q + 3.0 * w.kv + w.d);
  if (w.rotary) attention = std::max({attention, 3.0 * w.q + 2.0 * w.kv, w.q + 4.0 * w.kv});
  // q/k norms: their transposes run on permuted copies of dq and dk beside them.
  attention += w.qk_norms;
  // A post norm's transpose hands each branch a cotangent of its own (d) beside the residual's.
  const double branch = w.post_norms ? 3.0 * w.d : 2.0 * w.d;
  const double per_position = std::max({branch + attention, branch + w.mlp, 6.0 * w.d});
  return static_cast<double>(length) * per_position;
}

double ActivationElementsPerLayer(const ModelConfig& config, int64_t length) {
  const double positions = static_cast<double>(length);
  return positions * (12.0 * static_cast<double>(config.hidden_size) + 3.0 * static_cast<double>(config.intermediate_size)) +
         2.0 * static_cast<double>(config.num_heads) * positions * positions;
}

}  // namespace posbias::models
