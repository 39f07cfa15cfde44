// Prints docs/reference/families.md: the decoder families as the one decoder reads them (the rows
// of server/models/architecture.h) and every preset's shape (server/models/config.cc), so the
// docs' family table is made from the rows, never kept by hand. The test docs.families compares
// the committed page with what this prints (tests/docs/check_generated.py); `--write PAGE` rewrites it.
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "server/models/architecture.h"
#include "server/models/config.h"

namespace {

using posbias::models::Architecture;
using posbias::models::Family;

const char* NormName(Architecture::Norm norm) { return norm == Architecture::Norm::kLayerNorm ? "LayerNorm" : "RMSNorm"; }

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
  }
  return "?";
}

const char* Yes(bool value) { return value ? "yes" : "no"; }

std::string Page() {
  std::ostringstream out;
  out << "# Model families\n\n"
         "Generated from the family rows (`server/models/architecture.h`, the table in\n"
         "`server/models/config.cc`) by the `docs_family_table` tool; the test `docs.families` fails when\n"
         "this page differs from what the rows say. A family is one row of facts the one decoder and the\n"
         "one reverse pass read.\n\n"
         "| family (`model_type`) | norm | attention | MLP | positions | grouped-query | head_dim in config | "
         "rope_scaling | partial rotary | sliding window | parallel residual |\n"
         "|---|---|---|---|---|---|---|---|---|---|---|\n";
  for (Family family : {Family::kGpt2, Family::kQwen2, Family::kLlama, Family::kMistral, Family::kGptNeoX}) {
    const Architecture* a = posbias::models::ArchitectureOf(family);
    out << "| `" << posbias::models::FamilyName(family) << "` | " << NormName(a->norm) << " | " << LayoutName(a->attention)
        << " | " << MlpName(a->mlp) << " | " << (a->positions == Architecture::Positions::kLearned ? "learned" : "rotary")
        << " | " << Yes(a->grouped_query) << " | " << Yes(a->explicit_head_dim) << " | " << Yes(a->rope_scaling) << " | "
        << Yes(a->partial_rotary) << " | " << Yes(a->sliding_window) << " | " << Yes(a->parallel_residual) << " |\n";
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
