// The config room's shared tables (private to server/models/: config.cc, config_json.cc,
// family_table.cc, presets.cc and size_formulas.cc include it, nothing else does): the family
// rows, the presets, and the builders config.json's readers start from.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "server/models/architecture.h"
#include "server/models/config.h"

namespace posbias::models::internal {

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

// Every family's row (family_table.cc), in the Family enum's order.
std::span<const FamilyRow> FamilyRows();
// The row of a 2025-26 family named by a model_type, or nullptr.
const FamilyRow* TodaysFamily(const std::string& model_type);
const FamilyRow* RowOf(Family family);
// "a, b<last>c": names joined by commas, the last two by `last`.
std::string JoinedList(const std::vector<std::string>& names, const char* last);

// Every preset by name (presets.cc).
const std::map<std::string, ModelConfig>& Presets();
// The families' shapes as presets and config.json's readers build them (presets.cc).
ModelConfig Gpt2(int64_t layers, int64_t width, int64_t heads);
ModelConfig Qwen2(int64_t layers, int64_t width, int64_t heads, int64_t kv_heads, int64_t mlp);
ModelConfig Llama(int64_t layers, int64_t width, int64_t heads, int64_t kv_heads, int64_t mlp, int64_t vocab);
ModelConfig Pythia(int64_t layers, int64_t width, int64_t heads);
ModelConfig LlamaLike(Family family, int64_t layers, int64_t width, int64_t heads, int64_t kv_heads, int64_t mlp,
                      int64_t vocab, int64_t head_dim);

}  // namespace posbias::models::internal
