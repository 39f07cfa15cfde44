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

// Llama's layout under another family's name, with a head width (0 = width / heads).
ModelConfig LlamaLike(Family family, int64_t layers, int64_t width, int64_t heads, int64_t kv_heads, int64_t mlp,
                      int64_t vocab, int64_t head_dim) {
  ModelConfig config = Llama(layers, width, heads, kv_heads, mlp, vocab);
  config.family = family;
  config.explicit_head_dim = head_dim;
  return config;
}

// The per-layer attention pattern of `period` layers: sliding but every period-th (Gemma 2: 2,
// Gemma 3: 6), as their configuration classes' default layer_types.
std::vector<LayerAttention> EveryNthFull(int64_t period) {
  std::vector<LayerAttention> types(static_cast<size_t>(period), LayerAttention::kSliding);
  types.back() = LayerAttention::kFull;
  return types;
}

// SmolLM3's default no_rope_layers: every interval-th layer without rotary.
std::vector<bool> EveryNthWithoutRope(int64_t interval) {
  std::vector<bool> rope(static_cast<size_t>(interval), true);
  rope.back() = false;
  return rope;
}

// The presets of the families of the rows (2025-26 checkpoints) at their published
// shapes (each checkpoint's config.json), and a tiny shape of each for tests.
void AddTodaysPresets(std::map<std::string, ModelConfig>& map) {
  ModelConfig qwen3 = LlamaLike(Family::kQwen3, 28, 1024, 16, 8, 3072, 151936, 128);
  qwen3.max_positions = 40960, qwen3.rope_theta = 1e6, qwen3.norm_eps = 1e-6, qwen3.tie_embeddings = true;
  map["qwen3-0.6b"] = qwen3;
  ModelConfig gemma = LlamaLike(Family::kGemma, 18, 2048, 8, 1, 16384, 256000, 256);
  gemma.max_positions = 8192, gemma.norm_eps = 1e-6, gemma.tie_embeddings = true;
  map["gemma-2b"] = gemma;
  ModelConfig gemma2 = LlamaLike(Family::kGemma2, 26, 2304, 8, 4, 9216, 256000, 256);
  gemma2.max_positions = 8192, gemma2.norm_eps = 1e-6, gemma2.tie_embeddings = true;
  gemma2.sliding_window = 4096, gemma2.layer_types = EveryNthFull(2), gemma2.query_pre_attn_scalar = 256;
  gemma2.attn_logit_softcapping = 50, gemma2.final_logit_softcapping = 30;
  map["gemma2-2b"] = gemma2;
  ModelConfig gemma3 = LlamaLike(Family::kGemma3, 26, 1152, 4, 1, 6912, 262144, 256);
  gemma3.max_positions = 32768, gemma3.norm_eps = 1e-6, gemma3.tie_embeddings = true;
  gemma3.sliding_window = 512, gemma3.layer_types = EveryNthFull(6), gemma3.query_pre_attn_scalar = 256;
  gemma3.rope_theta = 1e6, gemma3.rope_local_theta = 10000;
  map["gemma3-1b"] = gemma3;
  // Phi-4-mini-instruct: partial rotary 0.75, its window (262144) longer than any context; its
  // longrope factors are not reproduced here (a preset's frequencies are the plain ones; a
  // checkpoint's config.json brings its own).
  ModelConfig phi4 = LlamaLike(Family::kPhi3, 32, 3072, 24, 8, 8192, 200064, 0);
  phi4.max_positions = 131072, phi4.norm_eps = 1e-5, phi4.tie_embeddings = true, phi4.rotary_pct = 0.75;
  map["phi4-mini"] = phi4;
  ModelConfig olmo2 = LlamaLike(Family::kOlmo2, 16, 2048, 16, 16, 8192, 100352, 0);
  olmo2.max_positions = 4096, olmo2.rope_theta = 500000, olmo2.norm_eps = 1e-6;
  map["olmo2-1b"] = olmo2;
  ModelConfig granite = LlamaLike(Family::kGranite, 40, 2048, 32, 8, 8192, 49155, 0);
  granite.max_positions = 131072, granite.rope_theta = 5e6, granite.tie_embeddings = true;
  granite.embedding_multiplier = 12, granite.attention_multiplier = 0.015625, granite.residual_multiplier = 0.22;
  granite.logits_scaling = 8;
  map["granite3.1-2b"] = granite;
  ModelConfig smollm3 = LlamaLike(Family::kSmolLm3, 36, 2048, 16, 4, 11008, 128256, 0);
  smollm3.max_positions = 65536, smollm3.rope_theta = 5e6, smollm3.norm_eps = 1e-6, smollm3.tie_embeddings = true;
  smollm3.rope_layers = EveryNthWithoutRope(4);
  map["smollm3-3b"] = smollm3;
  // Tiny shapes: 2 layers (one sliding, one full where the family alternates), width 64.
  for (const auto& [name, base] : std::vector<std::pair<std::string, ModelConfig>>{
           {"qwen3-tiny", qwen3}, {"gemma-tiny", gemma}, {"gemma2-tiny", gemma2}, {"gemma3-tiny", gemma3},
           {"phi3-tiny", phi4}, {"olmo2-tiny", olmo2}, {"granite-tiny", granite}, {"smollm3-tiny", smollm3}}) {
    ModelConfig tiny = base;
    tiny.num_layers = 2, tiny.hidden_size = 64, tiny.num_heads = 4, tiny.num_kv_heads = 2;
    tiny.intermediate_size = 128, tiny.vocab_size = 128, tiny.max_positions = 512;
    tiny.explicit_head_dim = base.explicit_head_dim > 0 ? 32 : 0;  // 4 x 32 != 64 where the family sets head_dim.
    if (tiny.sliding_window > 0 || tiny.family == Family::kPhi3) tiny.sliding_window = 8;
    if (!tiny.layer_types.empty()) tiny.layer_types = EveryNthFull(2);
    if (!tiny.rope_layers.empty()) tiny.rope_layers = EveryNthWithoutRope(2);
    if (tiny.query_pre_attn_scalar > 0) tiny.query_pre_attn_scalar = 32;
    tiny.rope_theta = 10000;
    map[name] = tiny;
  }
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
    llama32.rope_scaling.type = RopeScaling::Type::kLlama3;
    llama32.rope_scaling.factor = 32.0;
    llama32.rope_scaling.low_freq_factor = 1.0, llama32.rope_scaling.high_freq_factor = 4.0;
    llama32.rope_scaling.original_max_positions = 8192;
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
    AddTodaysPresets(*map);
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

// The rows of 2025-26's families, from Llama's and one another's (the modeling files they copy).
constexpr Arch Qwen3Row() {
  Arch a = kLlamaArchitecture;
  a.mlp_bias = Arch::Bias::kNone;
  a.sliding_window = a.layer_types = true;
  a.qk_norm = Arch::QkNorm::kPerHead;
  a.names.q_norm = "q_norm", a.names.k_norm = "k_norm";
  return a;
}
constexpr Arch GemmaRow() {
  Arch a = kLlamaArchitecture;
  a.norm = Arch::Norm::kRmsNormOnePlus;
  a.mlp = Arch::Mlp::kGeGluTanh;
  a.mlp_bias = Arch::Bias::kNone;
  a.embedding_scale = Arch::EmbeddingScale::kSqrtWidthInEmbedding;
  return a;
}
constexpr Arch Gemma2Row() {
  Arch a = GemmaRow();
  a.names.post_attention_norm = "post_attention_layernorm";
  a.names.norm2 = "pre_feedforward_layernorm";
  a.names.post_mlp_norm = "post_feedforward_layernorm";
  a.sliding_window = a.layer_types = a.soft_capping = true;
  return a;
}
constexpr Arch Gemma3Row() {
  Arch a = Gemma2Row();
  a.qk_norm = Arch::QkNorm::kPerHead;
  a.names.q_norm = "q_norm", a.names.k_norm = "k_norm";
  a.local_rope_base = true;
  return a;
}
constexpr Arch Phi3Row() {
  Arch a = kLlamaArchitecture;
  a.attention = Arch::AttentionLayout::kFusedColumns;
  a.qkv_bias = a.o_bias = a.mlp_bias = Arch::Bias::kNone;
  a.names.q = "qkv_proj", a.names.k = nullptr, a.names.v = nullptr;
  a.names.mlp_gate = "gate_up_proj", a.names.mlp_in = nullptr;
  a.fused_gate_up = true;
  a.partial_rotary = a.sliding_window = a.long_rope = true;
  return a;
}
constexpr Arch Olmo2Row() {
  Arch a = kLlamaArchitecture;
  a.mlp_bias = Arch::Bias::kNone;
  a.names.norm1 = nullptr, a.names.norm2 = nullptr;
  a.names.post_attention_norm = "post_attention_layernorm";
  a.names.post_mlp_norm = "post_feedforward_layernorm";
  a.qk_norm = Arch::QkNorm::kWholeProjection;
  a.names.q_norm = "q_norm", a.names.k_norm = "k_norm";
  return a;
}
constexpr Arch GraniteRow() {
  Arch a = kLlamaArchitecture;
  a.embedding_scale = Arch::EmbeddingScale::kMultiplierInBody;
  a.multipliers = true;
  return a;
}
constexpr Arch SmolLm3Row() {
  Arch a = kLlamaArchitecture;
  a.sliding_window = a.layer_types = a.nope_layers = true;
  return a;
}
constexpr Arch kQwen3Architecture = Qwen3Row(), kGemmaArchitecture = GemmaRow(), kGemma2Architecture = Gemma2Row(),
               kGemma3Architecture = Gemma3Row(), kPhi3Architecture = Phi3Row(), kOlmo2Architecture = Olmo2Row(),
               kGraniteArchitecture = GraniteRow(), kSmolLm3Architecture = SmolLm3Row();

// Every family: its name (Hugging Face's model_type for the built decoders), the class
// config.json's architectures names, the preset --arch starts from, whether a config.json may name
// it, and its decoder row (none for cesaro and TorchScript).
struct FamilyRow {
  Family family;
  const char* name;
  const char* causal_lm;    // Hugging Face's *ForCausalLM class; nullptr: none.
  const char* base_preset;  // nullptr: not built from a config (TorchScript).
  bool hugging_face;
  const Architecture* architecture;
};
constexpr FamilyRow kFamilies[] = {
    {Family::kGpt2, "gpt2", "GPT2LMHeadModel", "gpt2", true, &kGpt2Architecture},
    {Family::kQwen2, "qwen2", "Qwen2ForCausalLM", "qwen2-0.5b", true, &kQwen2Architecture},
    {Family::kLlama, "llama", "LlamaForCausalLM", "llama3.2-1b", true, &kLlamaArchitecture},
    {Family::kMistral, "mistral", "MistralForCausalLM", "mistral-7b", true, &kMistralArchitecture},
    {Family::kGptNeoX, "gpt_neox", "GPTNeoXForCausalLM", "pythia-160m", true, &kGptNeoXArchitecture},
    {Family::kQwen3, "qwen3", "Qwen3ForCausalLM", "qwen3-0.6b", true, &kQwen3Architecture},
    {Family::kGemma, "gemma", "GemmaForCausalLM", "gemma-2b", true, &kGemmaArchitecture},
    {Family::kGemma2, "gemma2", "Gemma2ForCausalLM", "gemma2-2b", true, &kGemma2Architecture},
    {Family::kGemma3, "gemma3_text", "Gemma3ForCausalLM", "gemma3-1b", true, &kGemma3Architecture},
    {Family::kPhi3, "phi3", "Phi3ForCausalLM", "phi4-mini", true, &kPhi3Architecture},
    {Family::kOlmo2, "olmo2", "Olmo2ForCausalLM", "olmo2-1b", true, &kOlmo2Architecture},
    {Family::kGranite, "granite", "GraniteForCausalLM", "granite3.1-2b", true, &kGraniteArchitecture},
    {Family::kSmolLm3, "smollm3", "SmolLM3ForCausalLM", "smollm3-3b", true, &kSmolLm3Architecture},
    {Family::kCesaro, "cesaro", nullptr, "cesaro", false, nullptr},
    {Family::kTorchScript, "torchscript", nullptr, nullptr, false, nullptr},
};

// The row of a 2025-26 family named by a model_type, or nullptr.
const FamilyRow* TodaysFamily(const std::string& model_type) {
  for (const auto& row : kFamilies) {
    if (row.hugging_face && model_type == row.name && row.family >= Family::kQwen3) return &row;
  }
  return nullptr;
}

const FamilyRow* RowOf(Family family) {
  for (const auto& row : kFamilies) {
    if (row.family == family) return &row;
  }
  return nullptr;
}

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

bool IsGated(Architecture::Mlp mlp) { return mlp == Architecture::Mlp::kSwiGlu || mlp == Architecture::Mlp::kGeGluTanh; }

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

std::string RotaryFamiliesText() {
  std::vector<std::string> names;
  for (const auto& row : kFamilies) {
    if (HasRotary(row.family)) names.push_back(row.name);
  }
  return JoinedList(names, ", ");
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
  if (json.contains("layer_types") && !json["layer_types"].is_null()) {
    auto types = ReadLayerTypes(json, layers);
    if (!types.ok()) return types.status();
    rule = *std::move(types);
  }
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
  config.exact_gelu = gemma && *activation == "gelu";
  config.max_positions = IntegerMember(json, "max_position_embeddings", 2048);
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
      const bool numbers = list.is_array() && std::all_of(list.begin(), list.end(), [](const auto& item) { return item.is_number(); });
      if (!numbers || static_cast<int64_t>(list.size()) != config.num_layers) {
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
  if (a.local_rope_base) config.rope_local_theta = json.value("rope_local_base_freq", 10000.0);
  if (a.multipliers) {
    config.embedding_multiplier = json.value("embedding_multiplier", 1.0);
    config.attention_multiplier = json.value("attention_multiplier", 1.0);
    config.residual_multiplier = json.value("residual_multiplier", 1.0);
    config.logits_scaling = json.value("logits_scaling", 1.0);
  }
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
