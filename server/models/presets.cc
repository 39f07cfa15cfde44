// The presets: the shapes of published models (--preset, a family's --arch) and the tiny shapes of
// the tests, built from the families' builders.
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/models/config.h"
#include "server/models/config_tables.h"
#include "server/status/error.h"

namespace posbias::models {
namespace internal {

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

}  // namespace internal
namespace {

using internal::Gpt2;
using internal::Llama;
using internal::LlamaLike;
using internal::Pythia;
using internal::Qwen2;

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

}  // namespace

const std::map<std::string, ModelConfig>& internal::Presets() {
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

std::vector<std::string> PresetNames() {
  std::vector<std::string> names;
  for (const auto& [name, config] : internal::Presets()) names.push_back(name);
  return names;
}

absl::StatusOr<ModelConfig> PresetConfig(const std::string& name) {
  const auto it = internal::Presets().find(name);
  if (it == internal::Presets().end()) {
    std::string allowed;
    for (const auto& known : PresetNames()) absl::StrAppend(&allowed, allowed.empty() ? "" : ", ", known);
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "preset", name, allowed});
  }
  return it->second;
}

}  // namespace posbias::models
