// The family table: each built decoder family's row (architecture.h), its config.json names, the
// preset --arch starts from, and the texts refusals list the families by.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/models/architecture.h"
#include "server/models/config.h"
#include "server/models/config_tables.h"

namespace posbias::models {
namespace {

using internal::FamilyRow;
using internal::JoinedList;

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

constexpr FamilyRow kFamilyRows[] = {
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

std::string ListText(bool hugging_face_only) {
  std::vector<std::string> names;
  for (const auto& row : kFamilyRows) {
    if (row.base_preset != nullptr && (!hugging_face_only || row.hugging_face)) names.push_back(row.name);
  }
  return JoinedList(names, " or ");
}

}  // namespace

namespace internal {

std::span<const FamilyRow> FamilyRows() { return kFamilyRows; }

const FamilyRow* TodaysFamily(const std::string& model_type) {
  for (const auto& row : kFamilyRows) {
    if (row.hugging_face && model_type == row.name && row.family >= Family::kQwen3) return &row;
  }
  return nullptr;
}

const FamilyRow* RowOf(Family family) {
  for (const auto& row : kFamilyRows) {
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

}  // namespace internal

std::string FamilyName(Family family) {
  for (const auto& row : kFamilyRows) {
    if (row.family == family) return row.name;
  }
  return "unknown";
}

std::vector<std::string> BuiltFamilyNames() {
  std::vector<std::string> names;
  for (const auto& row : kFamilyRows) {
    if (row.base_preset != nullptr) names.push_back(row.name);
  }
  return names;
}

std::string BuiltFamiliesText() { return ListText(false); }
std::string HuggingFaceFamiliesText() { return ListText(true); }

const Architecture* ArchitectureOf(Family family) {
  for (const auto& row : kFamilyRows) {
    if (row.family == family) return row.architecture;
  }
  return nullptr;
}

std::string FamiliesWhere(bool Architecture::*setting) {
  std::vector<std::string> names;
  for (const auto& row : kFamilyRows) {
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

std::string RotaryFamiliesText() {
  std::vector<std::string> names;
  for (const auto& row : kFamilyRows) {
    if (HasRotary(row.family)) names.push_back(row.name);
  }
  return JoinedList(names, ", ");
}

}  // namespace posbias::models
