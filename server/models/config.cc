#include "server/models/config.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/models/architecture.h"
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

ModelConfig Llama(int64_t layers, int64_t width, int64_t heads, int64_t kv_heads, int64_t mlp, int64_t vocab) {
  ModelConfig config = Qwen2(layers, width, heads, kv_heads, mlp);
  config.family = Family::kLlama;
  config.vocab_size = vocab;
  config.norm_eps = 1e-5;
  config.rope_theta = 10000;
  config.tie_embeddings = false;
  return config;
}

ModelConfig Pythia(int64_t layers, int64_t width, int64_t heads) {
  ModelConfig config = Gpt2(layers, width, heads);
  config.family = Family::kGptNeoX;
  config.vocab_size = 50304;
  config.max_positions = 2048;
  config.rope_theta = 10000;  // rotary_emb_base.
  config.rotary_pct = 0.25;
  config.parallel_residual = true;
  config.tie_embeddings = false;
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
    // Llama 3.2 1B: head_dim 64, rope_scaling llama3 (factor 32, low 1, high 4, original 8192).
    ModelConfig llama32 = Llama(16, 2048, 32, 8, 8192, 128256);
    llama32.max_positions = 131072;
    llama32.rope_theta = 500000;
    llama32.tie_embeddings = true;
    llama32.explicit_head_dim = 64;
    llama32.rope_scaling = {RopeScaling::Type::kLlama3, 32.0, 1.0, 4.0, 8192};
    (*map)["llama3.2-1b"] = llama32;
    ModelConfig tinyllama = Llama(22, 2048, 32, 4, 5632, 32000);
    tinyllama.max_positions = 2048;
    (*map)["tinyllama-1.1b"] = tinyllama;
    ModelConfig llama_tiny = Llama(2, 64, 4, 2, 128, 128);
    llama_tiny.max_positions = 512;
    (*map)["llama-tiny"] = llama_tiny;
    // Mistral 7B v0.1: sliding_window 4096.
    ModelConfig mistral = Llama(32, 4096, 32, 8, 14336, 32000);
    mistral.family = Family::kMistral;
    mistral.max_positions = 32768;
    mistral.sliding_window = 4096;
    (*map)["mistral-7b"] = mistral;
    ModelConfig mistral_tiny = Llama(2, 64, 4, 2, 128, 128);
    mistral_tiny.family = Family::kMistral;
    mistral_tiny.max_positions = 512;
    mistral_tiny.sliding_window = 8;
    (*map)["mistral-tiny"] = mistral_tiny;
    (*map)["pythia-70m"] = Pythia(6, 512, 8);
    (*map)["pythia-160m"] = Pythia(12, 768, 12);
    (*map)["pythia-410m"] = Pythia(24, 1024, 16);
    (*map)["pythia-1b"] = Pythia(16, 2048, 8);
    ModelConfig pythia_tiny = Pythia(2, 64, 4);
    pythia_tiny.vocab_size = 128;
    pythia_tiny.max_positions = 512;
    (*map)["pythia-tiny"] = pythia_tiny;
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

// A config.json key whose value changes the computation in a way that is not built.
absl::Status NotBuilt(const std::string& key, const std::string& value, const std::string& supported) {
  return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented,
                         absl::StrCat("config.json ", key, " = ", value, " is not implemented: supported ", supported));
}

bool IsSet(const nlohmann::json& json, const char* key) {
  const auto it = json.find(key);
  return it != json.end() && !it->is_null() && !(it->is_boolean() && !it->get<bool>());
}

// rope_scaling: absent, null or type "default" = none; "linear" and "llama3" are built.
absl::StatusOr<RopeScaling> ReadRopeScaling(const nlohmann::json& json) {
  RopeScaling scaling;
  const auto it = json.find("rope_scaling");
  if (it == json.end() || it->is_null()) return scaling;
  if (!it->is_object()) return NotBuilt("rope_scaling", it->dump(), "null or an object with rope_type linear or llama3");
  const auto type_it = it->contains("rope_type") ? it->find("rope_type") : it->find("type");
  const std::string type = type_it != it->end() && type_it->is_string() ? type_it->get<std::string>() : "";
  if (type == "default") return scaling;
  if (type != "linear" && type != "llama3") {
    return NotBuilt("rope_scaling.rope_type", type.empty() ? "(missing)" : "'" + type + "'", "linear, llama3, default or null");
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

// The decoder families' rows (architecture.h): how the one decoder assembles each of them.
using Arch = Architecture;
constexpr Arch kGpt2Architecture{
    Arch::Norm::kLayerNorm, Arch::AttentionLayout::kFusedColumns, Arch::Mlp::kGeluTanh, Arch::Positions::kLearned,
    Arch::Bias::kAlways, Arch::Bias::kAlways, Arch::Bias::kAlways,
    /*conv1d=*/true, /*grouped_query=*/false, /*explicit_head_dim=*/false, /*rope_scaling=*/false,
    /*partial_rotary=*/false, /*sliding_window=*/false, /*parallel_residual=*/false,
    /*mlp_width_follows_width=*/true, /*scaled_residual_init=*/true,
    /*norm2_before_attention=*/false, /*mlp_kept_without_mlp=*/false,
    {"transformer", "wte", "wpe", "h", "ln_f", nullptr, "ln_1", "attn", "ln_2", "mlp", "c_attn", nullptr, nullptr,
     "c_proj", "c_fc", nullptr, "c_proj"}};
// Qwen2, Llama and Mistral share their names: Qwen2's q, k, v always have biases and o none.
constexpr Arch::Names kLlamaNames{"model", "embed_tokens", nullptr, "layers", "norm", "lm_head", "input_layernorm",
                                  "self_attn", "post_attention_layernorm", "mlp", "q_proj", "k_proj", "v_proj",
                                  "o_proj", "up_proj", "gate_proj", "down_proj"};
constexpr Arch kQwen2Architecture{
    Arch::Norm::kRmsNorm, Arch::AttentionLayout::kSeparate, Arch::Mlp::kSwiGlu, Arch::Positions::kRotary,
    Arch::Bias::kAlways, Arch::Bias::kNone, Arch::Bias::kNone,
    /*conv1d=*/false, /*grouped_query=*/true, /*explicit_head_dim=*/false, /*rope_scaling=*/false,
    /*partial_rotary=*/false, /*sliding_window=*/false, /*parallel_residual=*/false,
    /*mlp_width_follows_width=*/false, /*scaled_residual_init=*/false,
    /*norm2_before_attention=*/false, /*mlp_kept_without_mlp=*/false, kLlamaNames};
constexpr Arch kLlamaArchitecture{
    Arch::Norm::kRmsNorm, Arch::AttentionLayout::kSeparate, Arch::Mlp::kSwiGlu, Arch::Positions::kRotary,
    Arch::Bias::kAttentionBias, Arch::Bias::kAttentionBias, Arch::Bias::kMlpBias,
    /*conv1d=*/false, /*grouped_query=*/true, /*explicit_head_dim=*/true, /*rope_scaling=*/true,
    /*partial_rotary=*/false, /*sliding_window=*/false, /*parallel_residual=*/false,
    /*mlp_width_follows_width=*/false, /*scaled_residual_init=*/false,
    /*norm2_before_attention=*/false, /*mlp_kept_without_mlp=*/false, kLlamaNames};
// Llama with a window (its config.json reader refuses biases).
constexpr Arch WithSlidingWindow(Arch architecture) {
  architecture.sliding_window = true;
  return architecture;
}
constexpr Arch kMistralArchitecture = WithSlidingWindow(kLlamaArchitecture);
constexpr Arch kGptNeoXArchitecture{
    Arch::Norm::kLayerNorm, Arch::AttentionLayout::kFusedPerHead, Arch::Mlp::kGeluErf, Arch::Positions::kRotary,
    Arch::Bias::kAlways, Arch::Bias::kAlways, Arch::Bias::kAlways,
    /*conv1d=*/false, /*grouped_query=*/false, /*explicit_head_dim=*/false, /*rope_scaling=*/true,
    /*partial_rotary=*/true, /*sliding_window=*/false, /*parallel_residual=*/true,
    /*mlp_width_follows_width=*/false, /*scaled_residual_init=*/false,
    /*norm2_before_attention=*/true, /*mlp_kept_without_mlp=*/true,
    {"gpt_neox", "embed_in", nullptr, "layers", "final_layer_norm", "embed_out", "input_layernorm", "attention",
     "post_attention_layernorm", "mlp", "query_key_value", nullptr, nullptr, "dense", "dense_h_to_4h", nullptr,
     "dense_4h_to_h"}};

// Every family: its name (Hugging Face's model_type for the five), the preset --arch starts from,
// whether a config.json may name it, and its decoder row (none for cesaro and TorchScript).
struct FamilyRow {
  Family family;
  const char* name;
  const char* base_preset;  // nullptr: not built from a config (TorchScript).
  bool hugging_face;
  const Architecture* architecture;
};
constexpr FamilyRow kFamilies[] = {
    {Family::kGpt2, "gpt2", "gpt2", true, &kGpt2Architecture},
    {Family::kQwen2, "qwen2", "qwen2-0.5b", true, &kQwen2Architecture},
    {Family::kLlama, "llama", "llama3.2-1b", true, &kLlamaArchitecture},
    {Family::kMistral, "mistral", "mistral-7b", true, &kMistralArchitecture},
    {Family::kGptNeoX, "gpt_neox", "pythia-160m", true, &kGptNeoXArchitecture},
    {Family::kCesaro, "cesaro", "cesaro", false, nullptr},
    {Family::kTorchScript, "torchscript", nullptr, false, nullptr},
};

std::string JoinedList(const std::vector<std::string>& names, const char* last) {
  std::string text;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&text, i == 0 ? "" : i + 1 == names.size() ? last : ", ", names[i]);
  }
  return text;
}

std::string ListText(bool hugging_face_only) {
  std::vector<std::string> names;
  for (const auto& row : kFamilies) {
    if (row.base_preset != nullptr && (!hugging_face_only || row.hugging_face)) names.push_back(row.name);
  }
  return JoinedList(names, " or ");
}

}  // namespace

std::string FamilyName(Family family) {
  for (const auto& row : kFamilies) {
    if (row.family == family) return row.name;
  }
  return "unknown";
}

std::vector<std::string> BuiltFamilyNames() {
  std::vector<std::string> names;
  for (const auto& row : kFamilies) {
    if (row.base_preset != nullptr) names.push_back(row.name);
  }
  return names;
}

std::string BuiltFamiliesText() { return ListText(false); }
std::string HuggingFaceFamiliesText() { return ListText(true); }

const Architecture* ArchitectureOf(Family family) {
  for (const auto& row : kFamilies) {
    if (row.family == family) return row.architecture;
  }
  return nullptr;
}

std::string FamiliesWhere(bool Architecture::*setting) {
  std::vector<std::string> names;
  for (const auto& row : kFamilies) {
    if (row.architecture != nullptr && row.architecture->*setting) names.push_back(row.name);
  }
  return JoinedList(names, " and ");
}

bool HasBias(Architecture::Bias rule, const ModelConfig& config) {
  switch (rule) {
    case Architecture::Bias::kNone: return false;
    case Architecture::Bias::kAlways: return true;
    case Architecture::Bias::kAttentionBias: return config.attention_bias;
    case Architecture::Bias::kMlpBias: return config.mlp_bias;
  }
  return false;
}

bool HasRotary(Family family) {
  const Architecture* architecture = ArchitectureOf(family);
  return architecture != nullptr && architecture->positions == Architecture::Positions::kRotary;
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
  for (const auto& row : kFamilies) {
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

namespace {

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
    if (!(scaling.factor >= 1.0 && std::isfinite(scaling.factor))) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "rope_scaling.factor", FormatValue(scaling.factor), ">= 1"});
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
  return absl::OkStatus();
}

}  // namespace

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
  return absl::OkStatus();
}

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

// config.json's text as a JSON object: at most 1 MiB, nested at most 64 levels.
absl::StatusOr<nlohmann::json> ParseConfigJson(const std::string& json_text) {
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
  nlohmann::json json = nlohmann::json::parse(json_text, depth_limit, false);
  if (too_deep) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("config.json is nested deeper than ", kMaxDepth, " levels"));
  }
  if (json.is_discarded() || !json.is_object()) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           "config.json is not a JSON object");
  }
  return json;
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
  }
  return nullptr;
}

}  // namespace

std::string ConfigToHuggingFaceJson(const ModelConfig& config) {
  nlohmann::ordered_json json;
  if (config.family == Family::kLlama || config.family == Family::kMistral) {
    const bool llama = config.family == Family::kLlama;
    json = {{"architectures", {llama ? "LlamaForCausalLM" : "MistralForCausalLM"}},
            {"model_type", llama ? "llama" : "mistral"},
            {"hidden_size", config.hidden_size}, {"intermediate_size", config.intermediate_size},
            {"num_hidden_layers", config.num_layers}, {"num_attention_heads", config.num_heads},
            {"num_key_value_heads", config.num_kv_heads}, {"head_dim", config.head_dim()},
            {"vocab_size", config.vocab_size}, {"max_position_embeddings", config.max_positions},
            {"rms_norm_eps", config.norm_eps}, {"rope_theta", config.rope_theta},
            {"rope_scaling", RopeScalingJson(config.rope_scaling)}, {"tie_word_embeddings", config.tie_embeddings},
            {"hidden_act", "silu"}, {"initializer_range", config.initializer_range}, {"torch_dtype", "float32"}};
    if (llama) {
      json["attention_bias"] = config.attention_bias;
      json["mlp_bias"] = config.mlp_bias;
    } else {
      json["sliding_window"] = config.sliding_window > 0 ? nlohmann::ordered_json(config.sliding_window) : nullptr;
    }
  } else if (config.family == Family::kGptNeoX) {
    json = {{"architectures", {"GPTNeoXForCausalLM"}}, {"model_type", "gpt_neox"},
            {"hidden_size", config.hidden_size}, {"intermediate_size", config.intermediate_size},
            {"num_hidden_layers", config.num_layers}, {"num_attention_heads", config.num_heads},
            {"vocab_size", config.vocab_size}, {"max_position_embeddings", config.max_positions},
            {"layer_norm_eps", config.norm_eps}, {"rotary_emb_base", config.rope_theta},
            {"rotary_pct", config.rotary_pct}, {"rope_scaling", RopeScalingJson(config.rope_scaling)},
            {"use_parallel_residual", config.parallel_residual}, {"tie_word_embeddings", config.tie_embeddings},
            {"hidden_act", "gelu"}, {"attention_bias", true}, {"initializer_range", config.initializer_range},
            {"torch_dtype", "float32"}};
  } else if (config.family == Family::kQwen2) {
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
  double layer = 2 * norm + d * (q + 2 * kv) + bias(a->qkv_bias, q + 2 * kv) + q * d + bias(a->o_bias, d);
  const double mlp_projections = a->mlp == Architecture::Mlp::kSwiGlu ? 3 : 2;
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
  bool rotary = false;
};
Widths WidthsOf(const ModelConfig& config) {
  Widths w;
  w.d = static_cast<double>(config.hidden_size);
  const Architecture* a = ArchitectureOf(config.family);
  const bool swiglu = a != nullptr && a->mlp == Architecture::Mlp::kSwiGlu;
  w.mlp = static_cast<double>(config.intermediate_size) * (swiglu ? 2.0 : 1.0);
  const double head_dim = config.explicit_head_dim > 0 || config.num_heads > 0 ? static_cast<double>(config.head_dim()) : 0.0;
  w.q = static_cast<double>(config.num_heads) * head_dim;
  w.kv = static_cast<double>(config.num_kv_heads) * head_dim;
  w.heads = static_cast<double>(config.num_heads);
  w.rotary = HasRotary(config.family) && !config.ablations.no_position_encoding;
  return w;
}

}  // namespace

double ReversePassElementsPerLayer(const ModelConfig& config, int64_t length) {
  const Widths w = WidthsOf(config);
  return static_cast<double>(length) * (3.0 * w.d + 2.0 * w.q + 2.0 * w.kv + w.mlp + w.heads + 2.0);
}

double ReversePassElementsPerRow(const ModelConfig& config, int64_t length) {
  const Widths w = WidthsOf(config);
  double attention = std::max(2.0 * w.q + 2.0 * w.kv, w.q + 3.0 * w.kv + w.d);
  if (w.rotary) attention = std::max({attention, 3.0 * w.q + 2.0 * w.kv, w.q + 4.0 * w.kv});
  const double per_position = std::max({2.0 * w.d + attention, 2.0 * w.d + w.mlp, 6.0 * w.d});
  return static_cast<double>(length) * per_position;
}

double ActivationElementsPerLayer(const ModelConfig& config, int64_t length) {
  const double positions = static_cast<double>(length);
  return positions * (12.0 * static_cast<double>(config.hidden_size) + 3.0 * static_cast<double>(config.intermediate_size)) +
         2.0 * static_cast<double>(config.num_heads) * positions * positions;
}

}  // namespace posbias::models
