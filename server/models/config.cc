#include "server/models/config.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/models/architecture.h"
#include "server/models/config_tables.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

absl::Status Positive(int64_t value, const std::string& field) {
  if (value > 0) return absl::OkStatus();
  return InvalidArgumentError({ErrorReason::kInvalidArgument, field, std::to_string(value), ">= 1"});
}

}  // namespace

double RotaryScaleOf(const ModelConfig& config) {
  const auto& scaling = config.rope_scaling;
  if (scaling.type != RopeScaling::Type::kLongRope) return 1.0;
  if (scaling.attention_factor > 0) return scaling.attention_factor;
  // transformers' _compute_longrope_parameters: sqrt(1 + ln factor / ln original) when the factor
  // (the config.json reader's: max_position_embeddings / original_max_position_embeddings where
  // the config names the original length beside rope_scaling) exceeds 1.
  if (scaling.factor <= 1.0) return 1.0;
  return std::sqrt(1.0 + std::log(scaling.factor) / std::log(static_cast<double>(scaling.original_max_positions)));
}

int64_t ModelConfig::WindowOf(int64_t layer) const {
  if (sliding_window <= 0) return 0;
  if (layer_types.empty()) return sliding_window;
  return layer_types[static_cast<size_t>(layer) % layer_types.size()] == LayerAttention::kSliding ? sliding_window : 0;
}

bool ModelConfig::RotatesAt(int64_t layer) const {
  return rope_layers.empty() || rope_layers[static_cast<size_t>(layer) % rope_layers.size()];
}

double ModelConfig::AttentionScale() const {
  if (attention_multiplier > 0) return attention_multiplier;
  if (query_pre_attn_scalar > 0) return 1.0 / std::sqrt(query_pre_attn_scalar);
  return 1.0 / std::sqrt(static_cast<double>(head_dim()));
}

absl::StatusOr<ModelConfig> FamilyConfig(const std::string& family) {
  for (const auto& row : internal::FamilyRows()) {
    if (row.base_preset != nullptr && family == row.name) return PresetConfig(row.base_preset);
  }
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "arch", family, BuiltFamiliesText()});
}

ModelConfig ApplyOverrides(ModelConfig config, const ConfigOverrides& overrides) {
  const bool same_kv = config.num_kv_heads == config.num_heads;
  const Architecture* architecture = ArchitectureOf(config.family);
  if (overrides.num_layers) config.num_layers = *overrides.num_layers;
  if (overrides.hidden_size) {
    config.hidden_size = *overrides.hidden_size;
    if (architecture != nullptr && architecture->mlp_width_follows_width && !overrides.intermediate_size) {
      config.intermediate_size = 4 * config.hidden_size;
    }
  }
  if (overrides.num_heads) config.num_heads = *overrides.num_heads;
  // A family without grouped-query attention (GPT-2, GPT-NeoX): its kv heads follow its heads.
  if (overrides.num_kv_heads) {
    config.num_kv_heads = *overrides.num_kv_heads;
  } else if (same_kv || (architecture != nullptr && !architecture->grouped_query)) {
    config.num_kv_heads = config.num_heads;
  }
  if (overrides.intermediate_size) config.intermediate_size = *overrides.intermediate_size;
  if (overrides.vocab_size) config.vocab_size = *overrides.vocab_size;
  if (overrides.max_positions) config.max_positions = *overrides.max_positions;
  if (overrides.rope_theta) config.rope_theta = *overrides.rope_theta;
  if (overrides.cesaro_alpha) config.cesaro_alpha = *overrides.cesaro_alpha;
  if (overrides.tie_embeddings) config.tie_embeddings = *overrides.tie_embeddings;
  if (overrides.initializer_range) config.initializer_range = *overrides.initializer_range;
  if (overrides.sliding_window) config.sliding_window = *overrides.sliding_window;
  if (overrides.head_dim) {
    config.explicit_head_dim = *overrides.head_dim;
  } else if (overrides.hidden_size || overrides.num_heads) {
    config.explicit_head_dim = 0;  // hidden_size / num_heads.
  }
  return config;
}

ModelConfig ApplyShapeOverrides(const ModelConfig& base, const ConfigOverrides& overrides) {
  ModelConfig config = ApplyOverrides(base, overrides);
  if (!overrides.hidden_size && !overrides.num_heads) return config;
  if (overrides.hidden_size && !overrides.intermediate_size && base.hidden_size > 0) {
    const double ratio = static_cast<double>(base.intermediate_size) / static_cast<double>(base.hidden_size);
    config.intermediate_size = std::max<int64_t>(1, std::llround(ratio * static_cast<double>(config.hidden_size)));
  }
  if (overrides.num_heads && !overrides.num_kv_heads && base.num_kv_heads > 0 && config.num_heads > 0) {
    const int64_t group = std::max<int64_t>(1, base.num_heads / base.num_kv_heads);
    config.num_kv_heads = config.num_heads % group == 0 ? config.num_heads / group : config.num_heads;
  }
  if (config.rope_scaling.type != RopeScaling::Type::kNone) {
    const int64_t original = config.rope_scaling.original_max_positions;
    if (!overrides.max_positions && original > 0) config.max_positions = std::min(config.max_positions, original);
    config.rope_scaling = RopeScaling{};
  }
  return config;
}

std::string ShapeSummary(const ModelConfig& config) {
  const auto grouped = [](int64_t n) {
    std::string digits = std::to_string(n), out;
    for (size_t i = 0; i < digits.size(); ++i) {
      if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
      out += digits[i];
    }
    return out;
  };
  std::string text = absl::StrCat(FamilyName(config.family), ": ", config.num_layers, " layers, width ",
                                  config.hidden_size, ", ", config.num_heads, " heads (", config.num_kv_heads,
                                  " key/value), MLP ", config.intermediate_size, ", vocabulary ",
                                  grouped(config.vocab_size), ", ", grouped(config.max_positions), " positions");
  if (HasRotary(config.family)) absl::StrAppend(&text, ", rope theta ", FormatValue(config.rope_theta));
  if (config.rope_scaling.type != RopeScaling::Type::kNone) absl::StrAppend(&text, " (scaled)");
  absl::StrAppend(&text, ": ", absl::StrFormat("%.2f", EstimatedParameters(config) / 1e6), " M parameters");
  return text;
}

namespace {

// The settings of 2025-26's rows (per-layer patterns, bases, soft-capping, multipliers, longrope)
// exist only where the family's row has them, and hold values the decoder can run.
absl::Status CheckRowSettings(const ModelConfig& config) {
  const Architecture* a = ArchitectureOf(config.family);
  const auto lacks = [a](bool Architecture::*setting) { return a == nullptr || !(a->*setting); };
  const auto not_here = [&config](const std::string& field, const std::string& value, bool Architecture::*setting,
                                  const std::string& neutral) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, field, value,
                                 absl::StrCat(neutral, " for ", FamilyName(config.family), " (a ",
                                              FamiliesWhere(setting), " setting)")});
  };
  if (!config.layer_types.empty() && lacks(&Architecture::layer_types)) {
    return not_here("layer_types", absl::StrCat(config.layer_types.size(), " entries"), &Architecture::layer_types, "none");
  }
  if (!config.rope_layers.empty() && lacks(&Architecture::nope_layers)) {
    return not_here("no_rope_layers", absl::StrCat(config.rope_layers.size(), " entries"), &Architecture::nope_layers, "none");
  }
  if (config.rope_local_theta != 0 && lacks(&Architecture::local_rope_base)) {
    return not_here("rope_local_base_freq", FormatValue(config.rope_local_theta), &Architecture::local_rope_base, "none");
  }
  if (config.rope_scaling.type == RopeScaling::Type::kLongRope && lacks(&Architecture::long_rope)) {
    return not_here("rope_scaling.rope_type", "longrope", &Architecture::long_rope, "linear or llama3");
  }
  for (const auto& [value, field] : std::vector<std::pair<double, std::string>>{
           {config.attn_logit_softcapping, "attn_logit_softcapping"},
           {config.final_logit_softcapping, "final_logit_softcapping"},
           {config.query_pre_attn_scalar, "query_pre_attn_scalar"}}) {
    if (!(value >= 0 && std::isfinite(value))) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, field, FormatValue(value), ">= 0 (0 = none)"});
    }
    if (value != 0 && lacks(&Architecture::soft_capping)) return not_here(field, FormatValue(value), &Architecture::soft_capping, "none");
  }
  for (const auto& [value, field, neutral] : std::vector<std::tuple<double, std::string, double>>{
           {config.embedding_multiplier, "embedding_multiplier", 1.0}, {config.attention_multiplier, "attention_multiplier", 0.0},
           {config.residual_multiplier, "residual_multiplier", 1.0}, {config.logits_scaling, "logits_scaling", 1.0}}) {
    if (!(value >= 0 && std::isfinite(value)) || (value == 0 && neutral != 0)) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, field, FormatValue(value), "a finite number > 0"});
    }
    if (value != neutral && lacks(&Architecture::multipliers)) {
      return not_here(field, FormatValue(value), &Architecture::multipliers, neutral == 0 ? "none" : "1");
    }
  }
  if (config.exact_gelu && (a == nullptr || a->mlp != Architecture::Mlp::kGeGluTanh)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "hidden_act", "gelu",
                                 absl::StrCat("the family's own activation (the erf GELU on a gate is a gemma setting)")});
  }
  if (!(config.rope_local_theta >= 0 && std::isfinite(config.rope_local_theta))) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_local_base_freq", FormatValue(config.rope_local_theta), "> 0"});
  }
  return absl::OkStatus();
}

// The attention's settings against the family's row: grouped-query heads, head_dim, the rotary
// fraction and scaling, and the sliding window exist only where the architecture has them.
absl::Status CheckAttentionSettings(const ModelConfig& config) {
  const Architecture* architecture = ArchitectureOf(config.family);
  const auto lacks = [architecture](bool Architecture::*setting) { return architecture == nullptr || !(architecture->*setting); };
  if (architecture != nullptr && !architecture->grouped_query && config.num_kv_heads != config.num_heads) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "kv_heads", std::to_string(config.num_kv_heads),
                                 absl::StrCat("equal to heads (", config.num_heads, ") for ", FamilyName(config.family))});
  }
  if (HasRotary(config.family) && config.rotary_dims() % 2 != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument,
                                 lacks(&Architecture::partial_rotary) ? "head_dim" : "head_dim * rotary_pct",
                                 std::to_string(config.rotary_dims()), "an even number of rotating dimensions"});
  }
  if (config.explicit_head_dim < 0 || config.explicit_head_dim > 1024) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "head_dim", std::to_string(config.explicit_head_dim),
                                 "0 (= width / heads) or 1..1024"});
  }
  if (config.explicit_head_dim > 0 && lacks(&Architecture::explicit_head_dim)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "head_dim", std::to_string(config.explicit_head_dim),
                                 absl::StrCat("width / heads (an explicit head_dim is a ",
                                              FamiliesWhere(&Architecture::explicit_head_dim), " setting)")});
  }
  if (config.sliding_window < 0 || (config.sliding_window > 0 && lacks(&Architecture::sliding_window))) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "sliding_window", std::to_string(config.sliding_window),
                                 config.sliding_window < 0 ? ">= 0 (0 = full causal attention)"
                                                           : absl::StrCat("0 (a window is a ", FamiliesWhere(&Architecture::sliding_window), " setting)")});
  }
  if (!lacks(&Architecture::partial_rotary) && !(config.rotary_pct > 0.0 && config.rotary_pct <= 1.0)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "rotary_pct", FormatValue(config.rotary_pct), "(0, 1]"});
  }
  const auto& scaling = config.rope_scaling;
  if (scaling.type != RopeScaling::Type::kNone && lacks(&Architecture::rope_scaling)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_scaling", "set",
                                 absl::StrCat("none (rope_scaling is built for ", FamiliesWhere(&Architecture::rope_scaling), ")")});
  }
  if (scaling.type != RopeScaling::Type::kNone) {
    // longrope's factor (max_position_embeddings over the original length) only sets the
    // attention factor, which is 1 below 1.
    const bool long_rope = scaling.type == RopeScaling::Type::kLongRope;
    if (!((long_rope ? scaling.factor > 0.0 : scaling.factor >= 1.0) && std::isfinite(scaling.factor))) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_scaling.factor", FormatValue(scaling.factor),
                                   long_rope ? "> 0" : ">= 1"});
    }
    if (scaling.type == RopeScaling::Type::kLongRope && scaling.original_max_positions < 1) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "original_max_position_embeddings",
                                   std::to_string(scaling.original_max_positions), ">= 1"});
    }
    if (scaling.type == RopeScaling::Type::kLongRope) {
      const size_t frequencies = static_cast<size_t>(config.rotary_dims() / 2);
      for (const auto* list : {&scaling.short_factor, &scaling.long_factor}) {
        const bool positive = std::all_of(list->begin(), list->end(), [](double f) { return f > 0 && std::isfinite(f); });
        if (list->size() != frequencies || !positive) {
          return InvalidArgumentError({ErrorReason::kInvalidArgument,
                                       list == &scaling.short_factor ? "rope_scaling.short_factor" : "rope_scaling.long_factor",
                                       absl::StrCat(list->size(), " factors"),
                                       absl::StrCat(frequencies, " positive factors (one per rotating frequency)")});
        }
      }
    }
    if (scaling.type == RopeScaling::Type::kLlama3 &&
        !(scaling.low_freq_factor > 0 && scaling.high_freq_factor > scaling.low_freq_factor &&
          std::isfinite(scaling.high_freq_factor) && scaling.original_max_positions > 0)) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_scaling",
                                   absl::StrCat("low_freq_factor ", scaling.low_freq_factor, ", high_freq_factor ",
                                                scaling.high_freq_factor, ", original_max_position_embeddings ",
                                                scaling.original_max_positions),
                                   "0 < low_freq_factor < high_freq_factor and original_max_position_embeddings >= 1"});
    }
  }
  return CheckRowSettings(config);
}

}  // namespace

absl::Status ValidateDimensions(const ModelConfig& config) {
  for (const auto& [value, field] : std::vector<std::pair<int64_t, std::string>>{
           {config.num_layers, "layers"}, {config.hidden_size, "width"}, {config.num_heads, "heads"},
           {config.num_kv_heads, "kv_heads"}, {config.intermediate_size, "mlp_width"},
           {config.vocab_size, "vocab"}, {config.max_positions, "max_positions"}}) {
    if (auto status = Positive(value, field); !status.ok()) return status;
  }
  if (config.num_layers > 1024) {
    return InvalidArgumentError({ErrorReason::kInvalidDepth, "layers", std::to_string(config.num_layers), "1..1024"});
  }
  // The maxima model_service.proto documents (ModelConfig, ConfigOverrides); the Cesaro routing
  // model has no position table, so it reaches L = 2^20.
  const int64_t max_positions = config.family == Family::kCesaro ? int64_t{1} << 20 : 131072;
  for (const auto& [value, field, most] : std::vector<std::tuple<int64_t, std::string, int64_t>>{
           {config.hidden_size, "width", 16384}, {config.num_heads, "heads", 256},
           {config.intermediate_size, "mlp_width", 65536}, {config.vocab_size, "vocab", 262144},
           {config.max_positions, "max_positions", max_positions}}) {
    if (value > most) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, field, std::to_string(value), absl::StrCat("1..", most)});
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateConfig(const ModelConfig& config) {
  if (auto status = ValidateDimensions(config); !status.ok()) return status;
  if (config.explicit_head_dim == 0 && config.hidden_size % config.num_heads != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "heads", std::to_string(config.num_heads),
                                 absl::StrCat("a divisor of width ", config.hidden_size)});
  }
  if (config.num_heads % config.num_kv_heads != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "kv_heads", std::to_string(config.num_kv_heads),
                                 absl::StrCat("a divisor of heads ", config.num_heads)});
  }
  if (auto status = CheckAttentionSettings(config); !status.ok()) return status;
  if (!(config.cesaro_alpha >= 0.0 && config.cesaro_alpha <= 1.0)) {
    return InvalidArgumentError({ErrorReason::kInvalidAlpha, "cesaro_alpha", FormatValue(config.cesaro_alpha), "[0, 1]"});
  }
  if (!(config.initializer_range > 0.0 && config.initializer_range <= 1.0)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "initializer_range", FormatValue(config.initializer_range), "(0, 1]"});
  }
  if (!(config.rope_theta > 0.0 && std::isfinite(config.rope_theta))) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_theta", FormatValue(config.rope_theta), "> 0"});
  }
  // The norms divide by sqrt(variance + eps): eps <= 0 can divide by zero, and a large one is no
  // normalization at all.
  if (!(config.norm_eps > 0.0 && config.norm_eps < 1.0)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "norm_eps", FormatValue(config.norm_eps),
                                 "(0, 1) (config.json rms_norm_eps or layer_norm_eps)"});
  }
  return absl::OkStatus();
}

}  // namespace posbias::models
