// config.json: Hugging Face's configs read into a ModelConfig (one reader per family, strict about
// what is not built) and a ModelConfig written back as one (what ExportModel writes beside the
// weights).
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/models/architecture.h"
#include "server/models/config.h"
#include "server/jsontext/bounded_json.h"
#include "server/models/config_tables.h"
#include "server/status/error.h"

namespace posbias::models {

using internal::FamilyRow;
using internal::Gpt2;
using internal::Llama;
using internal::LlamaLike;
using internal::Pythia;
using internal::Qwen2;
using internal::RowOf;
using internal::TodaysFamily;

namespace {

// An integer member of config.json, or `fallback` when absent. Anything but an integer that fits
// int64_t (a fraction, 1e100, 2^64, a string) throws nlohmann's type_error, which the caller
// reports as INVALID_MODEL_FILE: no silent truncation, and no out-of-range conversion.
int64_t IntegerMember(const nlohmann::json& json, const char* key, int64_t fallback) {
  const auto it = json.find(key);
  if (it == json.end()) return fallback;
  if (it->is_number_unsigned()) {
    if (it->get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return it->get<int64_t>();
  } else if (it->is_number_integer()) {
    return it->get<int64_t>();
  } else if (it->is_number_float()) {
    const double value = it->get<double>();
    // Integral and inside (-2^63, 2^63): the cast is exact.
    if (std::trunc(value) == value && std::fabs(value) < 9.2e18) return static_cast<int64_t>(value);
  }
  throw nlohmann::json::type_error::create(302, absl::StrCat(key, " = ", it->dump(), " is not an integer"), nullptr);
}

// The same for a member that must be there (json.at throws out_of_range when it is absent).
int64_t RequiredInteger(const nlohmann::json& json, const char* key) {
  (void)json.at(key);
  return IntegerMember(json, key, 0);
}

// A config.json key whose value changes the computation in a way that is not built.
absl::Status NotBuilt(const std::string& key, const std::string& value, const std::string& supported) {
  return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented,
                         absl::StrCat("config.json ", key, " = ", value, " is not implemented: supported ", supported));
}

bool IsSet(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it != json.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
}

// A list of numbers (longrope's factors).
std::vector<double> NumberList(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  if (it == json.end() || !it->is_array()) {
    throw nlohmann::json::type_error::create(302, absl::StrCat("rope_scaling.", key, " is not a list of numbers"), nullptr);
  }
  std::vector<double> values;
  for (const auto& item : *it) values.push_back(item.get<double>());
  return values;
}

// rope_scaling: absent, null or type "default" = none; "linear" and "llama3" are built, and
// "longrope" (or its older names "su", "yarn") where `long_rope` (Phi-3): the factor lists and
// the original length from config.json's top level.
absl::StatusOr<RopeScaling> ReadRopeScaling(const nlohmann::json& json, bool long_rope = false) {
  RopeScaling scaling;
  const auto it = json.find("rope_scaling");
  const char* supported = long_rope ? "longrope, default or null" : "linear, llama3, default or null";
  if (it == json.end() || it->is_null()) return scaling;
  if (!it->is_object()) return NotBuilt("rope_scaling", it->dump(), absl::StrCat("null or an object with rope_type ", supported));
  const auto type_it = it->contains("rope_type") ? it->find("rope_type") : it->find("type");
  const std::string type = type_it != it->end() && type_it->is_string() ? type_it->get<std::string>() : "";
  if (type == "default") return scaling;
  // Phi3Config takes its older names "su" and "yarn" for longrope.
  const bool is_long_rope = type == "longrope" || type == "su" || type == "yarn";
  if (long_rope ? !is_long_rope : type != "linear" && type != "llama3") {
    return NotBuilt("rope_scaling.rope_type", type.empty() ? "(missing)" : "'" + type + "'", supported);
  }
  if (is_long_rope) {
    scaling.type = RopeScaling::Type::kLongRope;
    scaling.short_factor = NumberList(*it, "short_factor");
    scaling.long_factor = NumberList(*it, "long_factor");
    if (IsSet(*it, "attention_factor")) scaling.attention_factor = it->at("attention_factor").get<double>();
    // Phi3Config's top-level original length (default 4096); the factor is the scaling's, else
    // max_position_embeddings over the original length (_compute_longrope_parameters).
    scaling.original_max_positions = IntegerMember(json, "original_max_position_embeddings", 4096);
    scaling.factor = IsSet(*it, "factor") ? it->at("factor").get<double>()
                                          : static_cast<double>(IntegerMember(json, "max_position_embeddings", 4096)) /
                                                static_cast<double>(std::max<int64_t>(1, scaling.original_max_positions));
    return scaling;
  }
  scaling.type = type == "linear" ? RopeScaling::Type::kLinear : RopeScaling::Type::kLlama3;
  scaling.factor = it->value("factor", 1.0);
  if (scaling.type == RopeScaling::Type::kLlama3) {
    scaling.low_freq_factor = it->value("low_freq_factor", 1.0);
    scaling.high_freq_factor = it->value("high_freq_factor", 4.0);
    scaling.original_max_positions = IntegerMember(*it, "original_max_position_embeddings", 8192);
  }
  return scaling;
}

// What llama, mistral and gpt_neox share: no soft-capping, the activation they are built with.
absl::Status RefuseUnbuilt(const nlohmann::json& json, const std::string& activation) {
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    if (IsSet(json, key)) return NotBuilt(key, json.at(key).dump(), "null (no soft-capping)");
  }
  const auto act = json.find("hidden_act");
  if (act != json.end() && !(act->is_string() && act->get<std::string>() == activation)) {
    return NotBuilt("hidden_act", act->dump(), "\"" + activation + "\"");
  }
  return absl::OkStatus();
}

}  // namespace

namespace {

// GPT-2's config.json (n_layer, n_embd, n_head, ...).
absl::StatusOr<ModelConfig> ReadGpt2Config(const nlohmann::json& json) {
  ModelConfig config = Gpt2(IntegerMember(json, "n_layer", 12), IntegerMember(json, "n_embd", 768), IntegerMember(json, "n_head", 12));
  if (json.contains("n_inner") && json["n_inner"].is_number()) config.intermediate_size = IntegerMember(json, "n_inner", 0);
  config.vocab_size = IntegerMember(json, "vocab_size", 50257);
  config.max_positions = IntegerMember(json, "n_positions", 1024);
  config.norm_eps = json.value("layer_norm_epsilon", 1e-5);
  config.tie_embeddings = json.value("tie_word_embeddings", true);
  return config;
}

// Qwen2's config.json: no sliding window or rope_scaling is built.
absl::StatusOr<ModelConfig> ReadQwen2Config(const nlohmann::json& json) {
  const int64_t heads = RequiredInteger(json, "num_attention_heads");
  ModelConfig config = Qwen2(RequiredInteger(json, "num_hidden_layers"), RequiredInteger(json, "hidden_size"), heads,
                             IntegerMember(json, "num_key_value_heads", heads), RequiredInteger(json, "intermediate_size"));
  config.vocab_size = IntegerMember(json, "vocab_size", 151936);
  config.max_positions = IntegerMember(json, "max_position_embeddings", 32768);
  config.norm_eps = json.value("rms_norm_eps", 1e-6);
  config.rope_theta = json.value("rope_theta", 1e4);
  config.tie_embeddings = json.value("tie_word_embeddings", false);
  if (IsSet(json, "use_sliding_window")) return NotBuilt("use_sliding_window", "true", "false (full causal attention)");
  if (auto scaling = ReadRopeScaling(json); !scaling.ok() || scaling->type != RopeScaling::Type::kNone) {
    return scaling.ok() ? NotBuilt("rope_scaling", json.at("rope_scaling").dump(), "null for qwen2") : scaling.status();
  }
  return config;
}

// Llama's and Mistral's config.json (`type` "llama" or "mistral"): head_dim, rope_scaling, biases (Llama) or the window (Mistral).
absl::StatusOr<ModelConfig> ReadLlamaConfig(const nlohmann::json& json, const std::string& type) {
  if (auto status = RefuseUnbuilt(json, "silu"); !status.ok()) return status;
  const int64_t heads = RequiredInteger(json, "num_attention_heads");
  ModelConfig config = Llama(RequiredInteger(json, "num_hidden_layers"), RequiredInteger(json, "hidden_size"), heads,
                             IntegerMember(json, "num_key_value_heads", heads), RequiredInteger(json, "intermediate_size"),
                             IntegerMember(json, "vocab_size", 32000));
  config.family = type == "llama" ? Family::kLlama : Family::kMistral;
  config.max_positions = IntegerMember(json, "max_position_embeddings", 2048);
  config.norm_eps = json.value("rms_norm_eps", 1e-6);
  config.rope_theta = json.value("rope_theta", 1e4);
  config.tie_embeddings = json.value("tie_word_embeddings", false);
  if (json.contains("head_dim") && !json["head_dim"].is_null()) {
    const int64_t head_dim = IntegerMember(json, "head_dim", 0);
    // The default spelled out stays the default (a width that heads divide).
    const bool is_default = config.num_heads > 0 && config.hidden_size % config.num_heads == 0 &&
                            head_dim == config.hidden_size / config.num_heads;
    config.explicit_head_dim = is_default ? 0 : head_dim;
  }
  auto scaling = ReadRopeScaling(json);
  if (!scaling.ok()) return scaling.status();
  config.rope_scaling = *scaling;
  if (type == "llama") {
    config.attention_bias = json.value("attention_bias", false);
    config.mlp_bias = json.value("mlp_bias", false);
  } else {
    for (const char* key : {"attention_bias", "mlp_bias"}) {
      if (IsSet(json, key)) return NotBuilt(key, json.at(key).dump(), "false (mistral has no biases)");
    }
    config.sliding_window = json.contains("sliding_window") && !json["sliding_window"].is_null()
                                ? IntegerMember(json, "sliding_window", 0) : 0;
  }
  return config;
}

// GPT-NeoX's config.json: partial rotary, the parallel residual, rope_scaling.
absl::StatusOr<ModelConfig> ReadGptNeoxConfig(const nlohmann::json& json) {
  if (auto status = RefuseUnbuilt(json, "gelu"); !status.ok()) return status;
  ModelConfig config = Pythia(RequiredInteger(json, "num_hidden_layers"), RequiredInteger(json, "hidden_size"),
                              RequiredInteger(json, "num_attention_heads"));
  config.intermediate_size = RequiredInteger(json, "intermediate_size");
  config.vocab_size = IntegerMember(json, "vocab_size", 50432);
  config.max_positions = IntegerMember(json, "max_position_embeddings", 2048);
  config.norm_eps = json.value("layer_norm_eps", 1e-5);
  config.rope_theta = json.contains("rotary_emb_base") ? json.value("rotary_emb_base", 1e4) : json.value("rope_theta", 1e4);
  config.rotary_pct = json.contains("rotary_pct") ? json.value("rotary_pct", 0.25) : json.value("partial_rotary_factor", 0.25);
  config.parallel_residual = json.value("use_parallel_residual", true);
  config.tie_embeddings = json.value("tie_word_embeddings", false);
  if (json.contains("attention_bias") && !json.value("attention_bias", true)) {
    return NotBuilt("attention_bias", "false", "true (gpt_neox's query_key_value and dense have biases)");
  }
  auto scaling = ReadRopeScaling(json);
  if (!scaling.ok()) return scaling.status();
  config.rope_scaling = *scaling;
  return config;
}

// Hugging Face's layer_types: one "sliding_attention" or "full_attention" per layer.
absl::StatusOr<std::vector<LayerAttention>> ReadLayerTypes(const nlohmann::json& json, int64_t layers) {
  const auto& list = json.at("layer_types");
  if (!list.is_array() || static_cast<int64_t>(list.size()) != layers) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json layer_types = ", list.dump().substr(0, 200), " is not a list of ",
                                        layers, " entries (one per layer)"));
  }
  std::vector<LayerAttention> types;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string value = list[i].is_string() ? list[i].get<std::string>() : list[i].dump();
    if (value != "sliding_attention" && value != "full_attention") {
      return NotBuilt(absl::StrCat("layer_types[", i, "]"), list[i].dump(), "\"sliding_attention\" or \"full_attention\"");
    }
    types.push_back(value == "sliding_attention" ? LayerAttention::kSliding : LayerAttention::kFull);
  }
  return types;
}

// The window and the per-layer pattern of a family with layer_types, as its configuration class
// defaults them: Qwen3 and SmolLM3 slide only with use_sliding_window (layers from
// max_window_layers on), Gemma 2 alternates from a sliding layer 0, Gemma 3 has every
// sliding_window_pattern-th layer full; Phi-3 (no layer_types) slides on every layer.
absl::Status ReadWindows(const nlohmann::json& json, Family family, ModelConfig& config) {
  const auto window = [&json](int64_t fallback) {
    return json.contains("sliding_window") && !json["sliding_window"].is_null() ? IntegerMember(json, "sliding_window", 0)
                                                                                  : fallback;
  };
  const int64_t layers = config.num_layers;
  // What a config says is checked whether or not this family then uses it (Qwen3 ignores both
  // without use_sliding_window), so every row refuses the same values.
  if (window(0) < 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "sliding_window", std::to_string(window(0)),
                                 ">= 0 (0 = full causal attention)"});
  }
  const bool has_layer_types = json.contains("layer_types") && !json["layer_types"].is_null();
  absl::StatusOr<std::vector<LayerAttention>> listed = std::vector<LayerAttention>{};
  if (has_layer_types) listed = ReadLayerTypes(json, layers);
  if (!listed.ok()) return listed.status();
  std::vector<LayerAttention> rule;
  switch (family) {
    case Family::kQwen3: {
      // Qwen3Config drops sliding_window unless use_sliding_window; the default pattern slides from
      // max_window_layers on.
      if (!json.value("use_sliding_window", false)) return absl::OkStatus();
      config.sliding_window = window(4096);
      const int64_t first = IntegerMember(json, "max_window_layers", 28);
      for (int64_t l = 0; l < layers; ++l) rule.push_back(l >= first ? LayerAttention::kSliding : LayerAttention::kFull);
      break;
    }
    case Family::kSmolLm3: {
      // SmolLM3's mask reads sliding_window on the sliding layers whatever use_sliding_window says;
      // the default pattern slides the NoPE layers when use_sliding_window and a window are set.
      config.sliding_window = window(0);
      const bool slides = json.value("use_sliding_window", false) && config.sliding_window > 0;
      for (int64_t l = 0; l < layers; ++l) {
        rule.push_back(slides && !config.RotatesAt(l) ? LayerAttention::kSliding : LayerAttention::kFull);
      }
      break;
    }
    case Family::kGemma2:
      config.sliding_window = window(4096);
      for (int64_t l = 0; l < layers; ++l) rule.push_back((l + 1) % 2 != 0 ? LayerAttention::kSliding : LayerAttention::kFull);
      break;
    case Family::kGemma3: {
      config.sliding_window = window(512);
      const int64_t period = IntegerMember(json, "sliding_window_pattern", 6);
      for (int64_t l = 0; l < layers; ++l) {
        rule.push_back(period > 0 && (l + 1) % period != 0 ? LayerAttention::kSliding : LayerAttention::kFull);
      }
      break;
    }
    case Family::kPhi3:
      config.sliding_window = window(0);
      return absl::OkStatus();
    default:
      return absl::OkStatus();
  }
  if (has_layer_types) rule = *std::move(listed);
  config.layer_types = std::move(rule);
  return absl::OkStatus();
}

// The MLP's activation: Gemma's MLP reads hidden_act, Gemma 2's and 3's hidden_activation (each
// ignores the other key): the tanh GELU ("gelu_pytorch_tanh", their default) or the erf one
// ("gelu"); the others "silu".
absl::StatusOr<std::string> ReadActivation(const nlohmann::json& json, Family family, bool gemma) {
  const char* key = gemma && family != Family::kGemma ? "hidden_activation" : "hidden_act";
  const std::string activation = IsSet(json, key) && json.at(key).is_string() ? json.at(key).get<std::string>()
                                 : IsSet(json, key)                           ? json.at(key).dump()
                                 : gemma                                      ? "gelu_pytorch_tanh"
                                                                              : "silu";
  const bool known = gemma ? activation == "gelu_pytorch_tanh" || activation == "gelu" : activation == "silu";
  if (!known) return NotBuilt(key, "\"" + activation + "\"", gemma ? "\"gelu_pytorch_tanh\" or \"gelu\"" : "\"silu\"");
  return activation;
}

absl::Status ReadRowScalars(const nlohmann::json& json, const Architecture& a, Family family, ModelConfig& config);

// The config.json of 2025-26's families (qwen3, gemma, gemma2, gemma3_text, phi3, olmo2, granite,
// smollm3): Llama's keys, and what the family's row adds (architecture.h), with the defaults of its
// configuration class where a key is absent.
absl::StatusOr<ModelConfig> ReadTodaysConfig(const nlohmann::json& json, Family family) {
  const Architecture& a = *ArchitectureOf(family);
  for (const char* key : {"num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"}) {
    if (IsSet(json, key) && !(json.at(key).is_number() && json.at(key).get<double>() == 0)) {
      return NotBuilt(key, json.at(key).dump(), "absent or 0 (mixture-of-experts layers are not built)");
    }
  }
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar"}) {
    if (!a.soft_capping && IsSet(json, key)) return NotBuilt(key, json.at(key).dump(), "null (no soft-capping)");
  }
  const bool gemma = a.mlp == Architecture::Mlp::kGeGluTanh;
  auto activation = ReadActivation(json, family, gemma);
  if (!activation.ok()) return activation.status();
  const int64_t heads = RequiredInteger(json, "num_attention_heads");
  ModelConfig config = LlamaLike(family, RequiredInteger(json, "num_hidden_layers"), RequiredInteger(json, "hidden_size"),
                                 heads, IntegerMember(json, "num_key_value_heads", heads),
                                 RequiredInteger(json, "intermediate_size"), IntegerMember(json, "vocab_size", 32000), 0);
  config.max_positions = IntegerMember(json, "max_position_embeddings", 2048);
  // Depth and widths bound every per-layer list below: checked before any is built.
  if (auto status = ValidateDimensions(config); !status.ok()) return status;
  config.exact_gelu = gemma && *activation == "gelu";
  config.norm_eps = json.value("rms_norm_eps", 1e-6);
  config.rope_theta = json.value("rope_theta", family == Family::kGemma3 ? 1e6 : family == Family::kSmolLm3 ? 2e6 : 1e4);
  const bool tied_by_default = gemma || family == Family::kSmolLm3;
  config.tie_embeddings = json.value("tie_word_embeddings", tied_by_default);
  if (json.contains("head_dim") && !json["head_dim"].is_null()) {
    const int64_t head_dim = IntegerMember(json, "head_dim", 0);
    const bool is_default = config.num_heads > 0 && config.hidden_size % config.num_heads == 0 &&
                            head_dim == config.hidden_size / config.num_heads;
    config.explicit_head_dim = is_default ? 0 : head_dim;
  }
  auto scaling = ReadRopeScaling(json, a.long_rope);
  if (!scaling.ok()) return scaling.status();
  config.rope_scaling = *scaling;
  if (a.qkv_bias == Architecture::Bias::kAttentionBias) config.attention_bias = json.value("attention_bias", false);
  else if (IsSet(json, "attention_bias")) return NotBuilt("attention_bias", json.at("attention_bias").dump(), "false");
  if (a.mlp_bias == Architecture::Bias::kMlpBias) config.mlp_bias = json.value("mlp_bias", false);
  else if (IsSet(json, "mlp_bias")) return NotBuilt("mlp_bias", json.at("mlp_bias").dump(), "false");
  if (a.nope_layers) {
    if (json.contains("no_rope_layers") && !json["no_rope_layers"].is_null()) {
      const auto& list = json["no_rope_layers"];
      // Numbers only: a float outside int64_t read as an integer is undefined behaviour.
      const bool flags = list.is_array() && std::all_of(list.begin(), list.end(), [](const auto& item) {
        return item.is_number() && (item.template get<double>() == 0.0 || item.template get<double>() == 1.0);
      });
      if (!flags || static_cast<int64_t>(list.size()) != config.num_layers) {
        return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                               absl::StrCat("config.json no_rope_layers is not a list of ", config.num_layers,
                                            " entries (1 = rotary, 0 = none, one per layer)"));
      }
      for (const auto& item : list) config.rope_layers.push_back(item.get<double>() != 0.0);
    } else {
      const int64_t interval = IntegerMember(json, "no_rope_layer_interval", 4);
      for (int64_t l = 0; l < config.num_layers; ++l) config.rope_layers.push_back(interval <= 0 || (l + 1) % interval != 0);
    }
  }
  if (auto status = ReadWindows(json, family, config); !status.ok()) return status;
  if (auto status = ReadRowScalars(json, a, family, config); !status.ok()) return status;
  return config;
}

// The scalar settings a row adds: partial rotary, soft-caps, the local rotary base, multipliers.
absl::Status ReadRowScalars(const nlohmann::json& json, const Architecture& a, Family family, ModelConfig& config) {
  if (a.partial_rotary) config.rotary_pct = json.value("partial_rotary_factor", 1.0);
  if (a.soft_capping) {
    const auto number_or_none = [&json](const char* key, double fallback) {
      if (!json.contains(key)) return fallback;
      return json[key].is_null() ? 0.0 : json[key].get<double>();
    };
    const bool gemma2 = family == Family::kGemma2;
    // Gemma 3's attention passes no soft-cap to its scores, whatever the config says.
    config.attn_logit_softcapping = gemma2 ? number_or_none("attn_logit_softcapping", 50.0) : 0.0;
    config.final_logit_softcapping = number_or_none("final_logit_softcapping", gemma2 ? 30.0 : 0.0);
    config.query_pre_attn_scalar = number_or_none("query_pre_attn_scalar", 256.0);
  }
  if (a.local_rope_base) {
    config.rope_local_theta = json.value("rope_local_base_freq", 10000.0);
    if (!(config.rope_local_theta > 0 && std::isfinite(config.rope_local_theta))) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_local_base_freq",
                                   FormatValue(config.rope_local_theta), "a finite number > 0"});
    }
  }
  if (a.multipliers) {
    config.embedding_multiplier = json.value("embedding_multiplier", 1.0);
    config.attention_multiplier = json.value("attention_multiplier", 1.0);
    config.residual_multiplier = json.value("residual_multiplier", 1.0);
    config.logits_scaling = json.value("logits_scaling", 1.0);
  }
  return absl::OkStatus();
}

// config.json's text as a JSON object: at most 1 MiB, nested at most 64 levels, parsed in linear
// time (jsontext/bounded_json.h); a syntax error names its byte.
absl::StatusOr<nlohmann::json> ParseConfigJson(const std::string& json_text) {
  if (json_text.size() > (size_t{1} << 20)) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json has ", json_text.size(), " bytes; at most 1 MiB"));
  }
  jsontext::ParseBounds bounds;
  bounds.max_depth = 64;  // Deeper than any config.json: no recursion can run away.
  jsontext::Parsed parsed = jsontext::Parse(json_text, bounds);
  if (parsed.outcome != jsontext::ParseOutcome::kOk) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json ", jsontext::Describe(parsed, bounds)));
  }
  if (!parsed.value.is_object()) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json is a JSON ", parsed.value.type_name(), ", not an object"));
  }
  return std::move(parsed.value);
}

}  // namespace

absl::StatusOr<ModelConfig> ConfigFromHuggingFaceJson(const std::string& json_text) {
  auto parsed = ParseConfigJson(json_text);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& json = *parsed;
  // Not json.value: a model_type that is not a string would throw outside the try below.
  const auto type_member = json.find("model_type");
  const std::string type =
      type_member != json.end() && type_member->is_string() ? type_member->get<std::string>() : "";
  absl::StatusOr<ModelConfig> config;
  try {
    if (type == "gpt2") {
      config = ReadGpt2Config(json);
    } else if (type == "qwen2") {
      config = ReadQwen2Config(json);
    } else if (type == "llama" || type == "mistral") {
      config = ReadLlamaConfig(json, type);
    } else if (type == "gpt_neox") {
      config = ReadGptNeoxConfig(json);
    } else if (const FamilyRow* row = TodaysFamily(type); row != nullptr) {
      config = ReadTodaysConfig(json, row->family);
    } else {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                             absl::StrCat("config.json model_type '", type,
                                          "' is not supported: allowed ", HuggingFaceFamiliesText()));
    }
    if (!config.ok()) return config.status();
    config->initializer_range = json.value("initializer_range", 0.02);
  } catch (const nlohmann::json::exception& error) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json: ", error.what()));
  }
  if (auto status = ValidateConfig(*config); !status.ok()) return status;
  return config;
}

namespace {

nlohmann::ordered_json RopeScalingJson(const RopeScaling& scaling) {
  switch (scaling.type) {
    case RopeScaling::Type::kNone: return nullptr;
    case RopeScaling::Type::kLinear: return {{"rope_type", "linear"}, {"factor", scaling.factor}};
    case RopeScaling::Type::kLlama3:
      return {{"rope_type", "llama3"}, {"factor", scaling.factor}, {"low_freq_factor", scaling.low_freq_factor},
              {"high_freq_factor", scaling.high_freq_factor},
              {"original_max_position_embeddings", scaling.original_max_positions}};
    case RopeScaling::Type::kLongRope: {
      nlohmann::ordered_json json = {{"rope_type", "longrope"}, {"short_factor", scaling.short_factor},
                                     {"long_factor", scaling.long_factor}};
      if (scaling.attention_factor > 0) json["attention_factor"] = scaling.attention_factor;
      return json;
    }
  }
  return nullptr;
}

nlohmann::ordered_json NumberOrNull(double value) { return value > 0 ? nlohmann::ordered_json(value) : nullptr; }

// Llama's keys and what the family's row adds (the reader's keys, ReadTodaysConfig).
nlohmann::ordered_json LlamaLikeJson(const ModelConfig& config, const FamilyRow& row) {
  const Architecture& a = *row.architecture;
  nlohmann::ordered_json json = {
      {"architectures", {row.causal_lm}}, {"model_type", row.name},
      {"hidden_size", config.hidden_size}, {"intermediate_size", config.intermediate_size},
      {"num_hidden_layers", config.num_layers}, {"num_attention_heads", config.num_heads},
      {"num_key_value_heads", config.num_kv_heads}};
  if (a.explicit_head_dim) json["head_dim"] = config.head_dim();
  json["vocab_size"] = config.vocab_size;
  json["max_position_embeddings"] = config.max_positions;
  json["rms_norm_eps"] = config.norm_eps;
  json["rope_theta"] = config.rope_theta;
  if (a.rope_scaling) json["rope_scaling"] = RopeScalingJson(config.rope_scaling);
  json["tie_word_embeddings"] = config.tie_embeddings;
  const bool gemma = a.mlp == Architecture::Mlp::kGeGluTanh;
  const char* activation = gemma ? (config.exact_gelu ? "gelu" : "gelu_pytorch_tanh") : "silu";
  json[gemma && config.family != Family::kGemma ? "hidden_activation" : "hidden_act"] = activation;
  json["initializer_range"] = config.initializer_range;
  json["torch_dtype"] = "float32";
  if (a.qkv_bias == Architecture::Bias::kAttentionBias) json["attention_bias"] = config.attention_bias;
  if (a.mlp_bias == Architecture::Bias::kMlpBias) json["mlp_bias"] = config.mlp_bias;
  if (a.sliding_window) json["sliding_window"] = config.sliding_window > 0 ? nlohmann::ordered_json(config.sliding_window) : nullptr;
  if (a.layer_types) {
    json["use_sliding_window"] = config.sliding_window > 0;
    std::vector<std::string> types;
    for (int64_t l = 0; l < config.num_layers; ++l) {
      types.push_back(config.WindowOf(l) > 0 ? "sliding_attention" : "full_attention");
    }
    json["layer_types"] = types;
  }
  if (a.partial_rotary) json["partial_rotary_factor"] = config.rotary_pct;
  if (a.long_rope && config.rope_scaling.type == RopeScaling::Type::kLongRope) {
    json["original_max_position_embeddings"] = config.rope_scaling.original_max_positions;
  }
  if (a.soft_capping) {
    json["query_pre_attn_scalar"] = NumberOrNull(config.query_pre_attn_scalar);
    json["attn_logit_softcapping"] = NumberOrNull(config.attn_logit_softcapping);
    json["final_logit_softcapping"] = NumberOrNull(config.final_logit_softcapping);
  }
  if (a.local_rope_base) json["rope_local_base_freq"] = config.rope_local_theta;
  if (a.multipliers) {
    json["embedding_multiplier"] = config.embedding_multiplier;
    json["attention_multiplier"] = config.attention_multiplier;
    json["residual_multiplier"] = config.residual_multiplier;
    json["logits_scaling"] = config.logits_scaling;
  }
  if (a.nope_layers) {
    std::vector<int> rope;
    for (int64_t l = 0; l < config.num_layers; ++l) rope.push_back(config.RotatesAt(l) ? 1 : 0);
    json["no_rope_layers"] = rope;
  }
  return json;
}

}  // namespace

std::string ConfigToHuggingFaceJson(const ModelConfig& config) {
  nlohmann::ordered_json json;
  const FamilyRow* row = RowOf(config.family);
  const Architecture* a = row != nullptr ? row->architecture : nullptr;
  if (a != nullptr && a->attention == Architecture::AttentionLayout::kFusedPerHead) {  // GPT-NeoX's keys.
    json = {{"architectures", {row->causal_lm}}, {"model_type", row->name},
            {"hidden_size", config.hidden_size}, {"intermediate_size", config.intermediate_size},
            {"num_hidden_layers", config.num_layers}, {"num_attention_heads", config.num_heads},
            {"vocab_size", config.vocab_size}, {"max_position_embeddings", config.max_positions},
            {"layer_norm_eps", config.norm_eps}, {"rotary_emb_base", config.rope_theta},
            {"rotary_pct", config.rotary_pct}, {"rope_scaling", RopeScalingJson(config.rope_scaling)},
            {"use_parallel_residual", config.parallel_residual}, {"tie_word_embeddings", config.tie_embeddings},
            {"hidden_act", "gelu"}, {"attention_bias", true}, {"initializer_range", config.initializer_range},
            {"torch_dtype", "float32"}};
  } else if (a != nullptr && a->positions == Architecture::Positions::kRotary) {
    json = LlamaLikeJson(config, *row);
  } else {  // GPT-2's keys (and what a weightless model exports).
    json = {{"architectures", {"GPT2LMHeadModel"}}, {"model_type", "gpt2"},
            {"n_embd", config.hidden_size}, {"n_layer", config.num_layers}, {"n_head", config.num_heads},
            {"n_inner", config.intermediate_size}, {"vocab_size", config.vocab_size},
            {"n_positions", config.max_positions}, {"n_ctx", config.max_positions},
            {"layer_norm_epsilon", config.norm_eps}, {"activation_function", "gelu_new"},
            {"initializer_range", config.initializer_range},
            {"tie_word_embeddings", config.tie_embeddings}, {"torch_dtype", "float32"}};
  }
  return json.dump(2);
}

}  // namespace posbias::models
