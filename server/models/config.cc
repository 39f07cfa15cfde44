#include "server/models/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"

namespace posbias::models {
namespace {

ModelConfig Gpt2(int64_t layers, int64_t width, int64_t heads) {
  ModelConfig config;
  config.family = Family::kGpt2;
  config.num_layers = layers;
  config.hidden_size = width;
  config.num_heads = config.num_kv_heads = heads;
  // Saturated: a config.json may name any width (ValidateConfig refuses what is too wide).
  constexpr int64_t kQuarter = std::numeric_limits<int64_t>::max() / 4;
  config.intermediate_size = 4 * std::clamp(width, -kQuarter, kQuarter);
  config.vocab_size = 50257;
  config.max_positions = 1024;
  config.norm_eps = 1e-5;
  return config;
}

ModelConfig Qwen2(int64_t layers, int64_t width, int64_t heads, int64_t kv_heads, int64_t mlp) {
  ModelConfig config;
  config.family = Family::kQwen2;
  config.num_layers = layers;
  config.hidden_size = width;
  config.num_heads = heads;
  config.num_kv_heads = kv_heads;
  config.intermediate_size = mlp;
  config.vocab_size = 151936;
  config.max_positions = 131072;
  config.norm_eps = 1e-6;
  config.rope_theta = 1e6;
  config.tie_embeddings = true;
  return config;
}

const std::map<std::string, ModelConfig>& Presets() {
  static const auto* presets = [] {
    auto* map = new std::map<std::string, ModelConfig>{
        {"gpt2", Gpt2(12, 768, 12)},
        {"gpt2-medium", Gpt2(24, 1024, 16)},
        {"gpt2-large", Gpt2(36, 1280, 20)},
        {"gpt2-xl", Gpt2(48, 1600, 25)},
        {"qwen2-0.5b", Qwen2(24, 896, 14, 2, 4864)},
        {"qwen2-1.5b", Qwen2(28, 1536, 12, 2, 8960)},
    };
    ModelConfig gpt2_tiny = Gpt2(2, 64, 4);
    gpt2_tiny.vocab_size = 128;
    gpt2_tiny.max_positions = 128;
    (*map)["gpt2-tiny"] = gpt2_tiny;
    ModelConfig qwen2_tiny = Qwen2(2, 64, 4, 2, 128);
    qwen2_tiny.vocab_size = 128;
    qwen2_tiny.max_positions = 512;
    qwen2_tiny.rope_theta = 10000;
    (*map)["qwen2-tiny"] = qwen2_tiny;
    ModelConfig cesaro = Gpt2(24, 16, 1);
    cesaro.family = Family::kCesaro;
    cesaro.vocab_size = 128;
    cesaro.max_positions = 1 << 20;
    (*map)["cesaro"] = cesaro;
    for (auto& [name, config] : *map) config.preset = name;
    return map;
  }();
  return *presets;
}

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

absl::Status Positive(int64_t value, const std::string& field) {
  if (value > 0) return absl::OkStatus();
  return InvalidArgumentError({ErrorReason::kInvalidArgument, field, std::to_string(value), ">= 1"});
}

}  // namespace

std::string FamilyName(Family family) {
  switch (family) {
    case Family::kGpt2: return "gpt2";
    case Family::kQwen2: return "qwen2";
    case Family::kCesaro: return "cesaro";
    case Family::kTorchScript: return "torchscript";
  }
  return "unknown";
}

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, config] : Presets()) names.push_back(name);
  return names;
}

absl::StatusOr<ModelConfig> PresetConfig(const std::string& name) {
  const auto it = Presets().find(name);
  if (it == Presets().end()) {
    std::string allowed;
    for (const auto& known : PresetNames()) absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", known);
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "preset", name, allowed});
  }
  return it->second;
}

absl::StatusOr<ModelConfig> FamilyConfig(const std::string& family) {
  if (family == "gpt2") return PresetConfig("gpt2");
  if (family == "qwen2") return PresetConfig("qwen2-0.5b");
  if (family == "cesaro") return PresetConfig("cesaro");
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "arch", family, "gpt2, qwen2 or cesaro"});
}

ModelConfig ApplyOverrides(ModelConfig config, const ConfigOverrides& overrides) {
  const bool same_kv = config.num_kv_heads == config.num_heads;
  if (overrides.num_layers) config.num_layers = *overrides.num_layers;
  if (overrides.hidden_size) {
    config.hidden_size = *overrides.hidden_size;
    if (config.family == Family::kGpt2 && !overrides.intermediate_size) {
      config.intermediate_size = 4 * config.hidden_size;
    }
  }
  if (overrides.num_heads) config.num_heads = *overrides.num_heads;
  // GPT-2 has no grouped-query attention: its kv heads follow its heads.
  if (overrides.num_kv_heads) {
    config.num_kv_heads = *overrides.num_kv_heads;
  } else if (same_kv || config.family == Family::kGpt2) {
    config.num_kv_heads = config.num_heads;
  }
  if (overrides.intermediate_size) config.intermediate_size = *overrides.intermediate_size;
  if (overrides.vocab_size) config.vocab_size = *overrides.vocab_size;
  if (overrides.max_positions) config.max_positions = *overrides.max_positions;
  if (overrides.rope_theta) config.rope_theta = *overrides.rope_theta;
  if (overrides.cesaro_alpha) config.cesaro_alpha = *overrides.cesaro_alpha;
  if (overrides.tie_embeddings) config.tie_embeddings = *overrides.tie_embeddings;
  if (overrides.initializer_range) config.initializer_range = *overrides.initializer_range;
  return config;
}

absl::Status ValidateConfig(const ModelConfig& config) {
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
  if (config.hidden_size % config.num_heads != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "heads", std::to_string(config.num_heads),
                                 absl::StrCat("a divisor of width ", config.hidden_size)});
  }
  if (config.num_heads % config.num_kv_heads != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "kv_heads", std::to_string(config.num_kv_heads),
                                 absl::StrCat("a divisor of heads ", config.num_heads)});
  }
  if (config.family == Family::kGpt2 && config.num_kv_heads != config.num_heads) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "kv_heads", std::to_string(config.num_kv_heads),
                                 absl::StrCat("equal to heads (", config.num_heads, ") for gpt2")});
  }
  if (config.family == Family::kQwen2 && config.head_dim() % 2 != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "width / heads", std::to_string(config.head_dim()),
                                 "an even head dimension (rotary embedding)"});
  }
  if (!(config.cesaro_alpha >= 0.0 && config.cesaro_alpha <= 1.0)) {
    return InvalidArgumentError({ErrorReason::kInvalidAlpha, "cesaro_alpha", FormatValue(config.cesaro_alpha), "[0, 1]"});
  }
  if (!(config.initializer_range > 0.0 && config.initializer_range <= 1.0)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "initializer_range", FormatValue(config.initializer_range), "(0, 1]"});
  }
  if (!(config.rope_theta > 0.0 && std::isfinite(config.rope_theta))) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_theta", FormatValue(config.rope_theta), "> 0"});
  }
  return absl::OkStatus();
}

absl::StatusOr<ModelConfig> ConfigFromHuggingFaceJson(const std::string& json_text) {
  // Refuses nesting deeper than any config.json has while parsing (no recursion can run away).
  constexpr int kMaxDepth = 64;
  bool too_deep = false;
  const auto depth_limit = [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json&) {
    const bool opens = event == nlohmann::json::parse_event_t::object_start ||
                       event == nlohmann::json::parse_event_t::array_start;
    if (opens && depth >= kMaxDepth) too_deep = true;
    return !too_deep;
  };
  if (json_text.size() > (size_t{1} << 20)) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json has ", json_text.size(), " bytes; at most 1 MiB"));
  }
  const nlohmann::json json = nlohmann::json::parse(json_text, depth_limit, false);
  if (too_deep) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json is nested deeper than ", kMaxDepth, " levels"));
  }
  if (json.is_discarded() || !json.is_object()) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           "config.json is not a JSON object");
  }
  // Not json.value: a model_type that is not a string would throw outside the try below.
  const auto type_member = json.find("model_type");
  const std::string type =
      type_member != json.end() && type_member->is_string() ? type_member->get<std::string>() : "";
  ModelConfig config;
  try {
    if (type == "gpt2") {
      config = Gpt2(IntegerMember(json, "n_layer", 12), IntegerMember(json, "n_embd", 768), IntegerMember(json, "n_head", 12));
      if (json.contains("n_inner") && json["n_inner"].is_number()) config.intermediate_size = IntegerMember(json, "n_inner", 0);
      config.vocab_size = IntegerMember(json, "vocab_size", 50257);
      config.max_positions = IntegerMember(json, "n_positions", 1024);
      config.norm_eps = json.value("layer_norm_epsilon", 1e-5);
      config.tie_embeddings = json.value("tie_word_embeddings", true);
    } else if (type == "qwen2") {
      const int64_t heads = RequiredInteger(json, "num_attention_heads");
      config = Qwen2(RequiredInteger(json, "num_hidden_layers"), RequiredInteger(json, "hidden_size"), heads,
                     IntegerMember(json, "num_key_value_heads", heads), RequiredInteger(json, "intermediate_size"));
      config.vocab_size = IntegerMember(json, "vocab_size", 151936);
      config.max_positions = IntegerMember(json, "max_position_embeddings", 32768);
      config.norm_eps = json.value("rms_norm_eps", 1e-6);
      config.rope_theta = json.value("rope_theta", 1e4);
      config.tie_embeddings = json.value("tie_word_embeddings", false);
    } else {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                             absl::StrCat("config.json model_type '", type, "' is not supported: allowed gpt2 or qwen2"));
    }
    config.initializer_range = json.value("initializer_range", 0.02);
  } catch (const nlohmann::json::exception& error) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json: ", error.what()));
  }
  if (auto status = ValidateConfig(config); !status.ok()) return status;
  return config;
}

std::string ConfigToHuggingFaceJson(const ModelConfig& config) {
  nlohmann::ordered_json json;
  if (config.family == Family::kQwen2) {
    json = {{"architectures", {"Qwen2ForCausalLM"}}, {"model_type", "qwen2"},
            {"hidden_size", config.hidden_size}, {"intermediate_size", config.intermediate_size},
            {"num_hidden_layers", config.num_layers}, {"num_attention_heads", config.num_heads},
            {"num_key_value_heads", config.num_kv_heads}, {"vocab_size", config.vocab_size},
            {"max_position_embeddings", config.max_positions}, {"rms_norm_eps", config.norm_eps},
            {"rope_theta", config.rope_theta}, {"tie_word_embeddings", config.tie_embeddings},
            {"hidden_act", "silu"}, {"initializer_range", config.initializer_range},
            {"torch_dtype", "float32"}};
  } else {
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

double EstimatedParameters(const ModelConfig& config) {
  const double d = static_cast<double>(config.hidden_size), m = static_cast<double>(config.intermediate_size);
  const double vocab = static_cast<double>(config.vocab_size), layers = static_cast<double>(config.num_layers);
  switch (config.family) {
    case Family::kGpt2:
      // Per layer: two LayerNorms, c_attn, c_proj, c_fc, the MLP c_proj; then ln_f.
      return layers * (4 * d * d + 2 * d * m + 9 * d + m) + (vocab + static_cast<double>(config.max_positions)) * d +
             2 * d;
    case Family::kQwen2: {
      const double kv = static_cast<double>(config.num_kv_heads * config.head_dim());
      const double layer = 2 * d * d + 2 * d * kv + 3 * d * m + 2 * d + d + 2 * kv;
      return layers * layer + vocab * d * (config.tie_embeddings ? 1 : 2) + d;
    }
    case Family::kCesaro: return vocab * d;
    case Family::kTorchScript: return 0;
  }
  return 0;
}

double ActivationElementsPerLayer(const ModelConfig& config, int64_t length) {
  const double positions = static_cast<double>(length);
  return positions * (12.0 * static_cast<double>(config.hidden_size) + 3.0 * static_cast<double>(config.intermediate_size)) +
         2.0 * static_cast<double>(config.num_heads) * positions * positions;
}

}  // namespace posbias::models
