// Prints docs/reference/families.md: the decoder families as the one decoder reads them (the rows
// of server/models/architecture.h) and every preset's shape (server/models/presets.cc), so the
// docs' family table is made from the rows, never kept by hand. The test docs.families compares
// the committed page with what this prints (tests/docs/check_generated.py); `--write PAGE` rewrites it.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "server/models/architecture.h"
#include "server/models/config.h"

namespace {

using posbias::models::Architecture;
using posbias::models::Family;

const char* NormName(Architecture::Norm norm) {
  switch (norm) {
    case Architecture::Norm::kLayerNorm: return "LayerNorm";
    case Architecture::Norm::kRmsNorm: return "RMSNorm";
    case Architecture::Norm::kRmsNormOnePlus: return "RMSNorm (1 + w)";
  }
  return "?";
}

// Where the block's norms sit, from the row's names.
std::string NormPlaces(const Architecture& a) {
  const bool pre = a.names.norm1 != nullptr, post = a.names.post_attention_norm != nullptr;
  return pre && post ? "before and after each branch" : post ? "after each branch" : "before each branch";
}

const char* QkNormName(Architecture::QkNorm norm) {
  switch (norm) {
    case Architecture::QkNorm::kNone: return "-";
    case Architecture::QkNorm::kPerHead: return "per head";
    case Architecture::QkNorm::kWholeProjection: return "whole projection";
  }
  return "?";
}

const char* EmbeddingScaleName(Architecture::EmbeddingScale scale) {
  switch (scale) {
    case Architecture::EmbeddingScale::kNone: return "-";
    case Architecture::EmbeddingScale::kSqrtWidthInEmbedding: return "sqrt(width), in the embedding";
    case Architecture::EmbeddingScale::kMultiplierInBody: return "embedding_multiplier, in the body";
  }
  return "?";
}

const char* LayoutName(Architecture::AttentionLayout layout) {
  switch (layout) {
    case Architecture::AttentionLayout::kSeparate: return "q, k, v, o";
    case Architecture::AttentionLayout::kFusedColumns: return "fused qkv columns";
    case Architecture::AttentionLayout::kFusedPerHead: return "fused qkv per head";
  }
  return "?";
}

const char* MlpName(Architecture::Mlp mlp) {
  switch (mlp) {
    case Architecture::Mlp::kGeluTanh: return "GELU (tanh)";
    case Architecture::Mlp::kGeluErf: return "GELU (erf)";
    case Architecture::Mlp::kSwiGlu: return "SwiGLU";
    case Architecture::Mlp::kGeGluTanh: return "GeGLU (tanh; erf as hidden_act says)";
  }
  return "?";
}

const char* Yes(bool value) { return value ? "yes" : "no"; }

std::string Page() {
  std::ostringstream out;
  out << "# Model families\n\n"
         "Generated from the family rows (`server/models/architecture.h`, the table in\n"
         "`server/models/family_table.cc`) by the `docs_family_table` tool; the test `docs.families` fails when\n"
         "this page differs from what the rows say. A family is one row of facts the one decoder and the\n"
         "one reverse pass read.\n\n"
         "| family (`model_type`) | norm | norms sit | q/k norm | attention | MLP | positions | grouped-query | "
         "head_dim in config | embeddings scaled by | parallel residual |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n";
  std::vector<Family> rows;
  for (const std::string& name : posbias::models::BuiltFamilyNames()) {
    const auto config = posbias::models::FamilyConfig(name);
    if (config.ok() && posbias::models::ArchitectureOf(config->family) != nullptr) rows.push_back(config->family);
  }
  for (Family family : rows) {
    const Architecture* a = posbias::models::ArchitectureOf(family);
    out << "| `" << posbias::models::FamilyName(family) << "` | " << NormName(a->norm) << " | " << NormPlaces(*a) << " | "
        << QkNormName(a->qk_norm) << " | " << LayoutName(a->attention) << (a->fused_gate_up ? ", fused gate_up" : "")
        << " | " << MlpName(a->mlp) << " | " << (a->positions == Architecture::Positions::kLearned ? "learned" : "rotary")
        << " | " << Yes(a->grouped_query) << " | " << Yes(a->explicit_head_dim) << " | "
        << EmbeddingScaleName(a->embedding_scale) << " | " << Yes(a->parallel_residual) << " |\n";
  }
  out << "\n### What a config.json may set, per family\n\n"
         "| family | rope_scaling | longrope | partial rotary | sliding window | per-layer windows (layer_types) | "
         "NoPE layers | local rotary base | soft-capping | multipliers |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n";
  for (Family family : rows) {
    const Architecture* a = posbias::models::ArchitectureOf(family);
    out << "| `" << posbias::models::FamilyName(family) << "` | " << Yes(a->rope_scaling) << " | " << Yes(a->long_rope)
        << " | " << Yes(a->partial_rotary) << " | " << Yes(a->sliding_window) << " | " << Yes(a->layer_types) << " | "
        << Yes(a->nope_layers) << " | " << Yes(a->local_rope_base) << " | " << Yes(a->soft_capping) << " | "
        << Yes(a->multipliers) << " |\n";
  }
  out << "\n`cesaro` is the routing model itself (h <- (1 - alpha) h + alpha causal-mean(h)), not a decoder row.\n\n"
         "## Presets\n\n"
         "| preset | family | layers | width | heads | kv heads | head width | MLP width | vocabulary | positions |\n"
         "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const std::string& name : posbias::models::PresetNames()) {
    const auto config = posbias::models::PresetConfig(name);
    if (!config.ok()) continue;
    const bool cesaro = config->family == Family::kCesaro;
    out << "| `" << name << "` | " << posbias::models::FamilyName(config->family) << " | " << config->num_layers << " | "
        << config->hidden_size << " | " << (cesaro ? "-" : std::to_string(config->num_heads)) << " | "
        << (cesaro ? "-" : std::to_string(config->num_kv_heads)) << " | "
        << (cesaro ? "-" : std::to_string(config->head_dim())) << " | "
        << (cesaro ? "-" : std::to_string(config->intermediate_size)) << " | " << config->vocab_size << " | "
        << config->max_positions << " |\n";
  }
  return out.str();
}

}  // namespace

int main(int argc, char** argv) {
  const std::string page = Page();
  if (argc == 3 && std::string(argv[1]) == "--write") {
    std::ofstream(argv[2]) << page;
    return 0;
  }
  std::cout << page;
  return 0;
}
