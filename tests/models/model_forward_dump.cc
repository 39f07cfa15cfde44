// Test tool for tests/models/equivalence_test.py: builds a model from flags, exports its weights and
// config.json, and writes its embeddings, final hidden states, logits and exact Jacobian norms for
// given token sequences, so an independent Python reimplementation can compare them.
#include <fstream>
#include <iostream>

#include <torch/torch.h>

#include "CLI/CLI.hpp"
#include "server/jacobian/engine.h"
#include "server/models/weights.h"

namespace {

std::vector<std::vector<int64_t>> ParseTokens(const std::string& text) {
  std::vector<std::vector<int64_t>> rows(1);
  for (size_t i = 0, start = 0; i <= text.size(); ++i) {
    if (i == text.size() || text[i] == ',' || text[i] == ';') {
      if (i > start) rows.back().push_back(std::stoll(text.substr(start, i - start)));
      if (i < text.size() && text[i] == ';') rows.emplace_back();
      start = i + 1;
    }
  }
  return rows;
}

posbias::safetensors::TensorToWrite Entry(const std::string& name, const torch::Tensor& t) {
  return {name, posbias::safetensors::DType::kF32, t.sizes().vec(), t.data_ptr<float>(),
          static_cast<size_t>(t.numel()) * sizeof(float)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"model_forward_dump"};
  std::string arch = "gpt2", tokens_text, weights_out, config_out, out;
  posbias::models::ConfigOverrides overrides;
  posbias::models::Ablations ablations;
  uint64_t seed = 0;
  app.add_option("--arch", arch);
  app.add_option("--layers", overrides.num_layers);
  app.add_option("--width", overrides.hidden_size);
  app.add_option("--heads", overrides.num_heads);
  app.add_option("--kv-heads", overrides.num_kv_heads);
  app.add_option("--mlp-width", overrides.intermediate_size);
  app.add_option("--vocab", overrides.vocab_size);
  app.add_option("--max-positions", overrides.max_positions);
  app.add_option("--rope-theta", overrides.rope_theta);
  app.add_option("--initializer-range", overrides.initializer_range);
  bool untied = false;
  app.add_flag("--untied", untied);
  app.add_flag("--no-position-encoding", ablations.no_position_encoding);
  app.add_flag("--uniform-attention", ablations.uniform_attention);
  app.add_flag("--no-mlp", ablations.no_mlp);
  app.add_option("--seed", seed);
  app.add_option("--tokens", tokens_text)->required();
  app.add_option("--weights-out", weights_out)->required();
  app.add_option("--config-out", config_out)->required();
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);
  if (untied) overrides.tie_embeddings = false;
  torch::set_num_threads(1);
  auto base = posbias::models::FamilyConfig(arch);
  if (!base.ok()) return std::cerr << base.status() << "\n", 2;
  auto config = posbias::models::ApplyOverrides(*base, overrides);
  config.ablations = ablations;
  auto model = posbias::models::BuildModel(config, seed);
  if (!model.ok()) return std::cerr << model.status() << "\n", 2;
  if (auto s = posbias::models::ExportWeights(**model, weights_out); !s.ok()) return std::cerr << s << "\n", 1;
  std::ofstream(config_out) << posbias::models::ConfigToHuggingFaceJson(config) << "\n";

  const auto rows = ParseTokens(tokens_text);
  std::vector<torch::Tensor> id_rows;
  for (const auto& row : rows) id_rows.push_back(torch::tensor(row, torch::kLong));
  auto ids = torch::stack(id_rows);
  torch::NoGradGuard no_grad;
  auto embeddings = (*model)->Embed(ids).contiguous();
  auto hidden = (*model)->Forward(embeddings, {}).hidden.contiguous();
  auto logits = (*model)->Logits(hidden).contiguous();

  posbias::jacobian::MeasureOptions options;
  options.length = ids.size(1);
  options.samples = ids.size(0);
  options.input = posbias::jacobian::InputKind::kGivenTokens;
  options.tokens = rows;
  options.keep_samples = true;
  options.branch_ratios = false;
  auto result = posbias::jacobian::Measure(**model, options);
  if (!result.ok()) return std::cerr << result.status() << "\n", 1;
  std::vector<float> flat;
  for (const auto& sample : result->raw[0]) flat.insert(flat.end(), sample.begin(), sample.end());
  auto norms = torch::tensor(flat, torch::kFloat32).view({ids.size(0), ids.size(1)}).contiguous();
  auto status = posbias::safetensors::WriteFile(
      out, {Entry("embeddings", embeddings), Entry("hidden", hidden), Entry("logits", logits),
            Entry("jacobian_sq_norms", norms)}, {});
  if (!status.ok()) return std::cerr << status << "\n", 1;
  return 0;
}
