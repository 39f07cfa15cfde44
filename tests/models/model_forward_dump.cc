// Test tool for tests/models/equivalence_test.py and families_test.py: builds a model from flags
// (a family or a preset, with overrides) or loads a Hugging Face checkpoint directory
// (--checkpoint: config.json and safetensors, single or sharded), exports its weights and
// config.json when asked, and writes its embeddings, final hidden states, logits and exact
// Jacobian norms for given token sequences (float32, or float64 with --float64), so an
// independent Python reimplementation can compare them.
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
  if (t.scalar_type() == torch::kFloat64) {
    return {name, posbias::safetensors::DType::kF64, t.sizes().vec(), t.data_ptr<double>(),
            static_cast<size_t>(t.numel()) * sizeof(double)};
  }
  return {name, posbias::safetensors::DType::kF32, t.sizes().vec(), t.data_ptr<float>(),
          static_cast<size_t>(t.numel()) * sizeof(float)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"model_forward_dump"};
  std::string arch = "gpt2", preset, checkpoint, tokens_text, weights_out, config_out, out;
  bool float64 = false;
  posbias::models::ConfigOverrides overrides;
  posbias::models::Ablations ablations;
  uint64_t seed = 0;
  app.add_option("--arch", arch);
  app.add_option("--preset", preset);
  app.add_option("--checkpoint", checkpoint, "A Hugging Face checkpoint directory (config.json + safetensors)");
  app.add_flag("--float64", float64, "Run, measure and write in float64");
  app.add_option("--sliding-window", overrides.sliding_window);
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
  app.add_option("--weights-out", weights_out);
  app.add_option("--config-out", config_out);
  app.add_option("--out", out)->required();
  CLI11_PARSE(app, argc, argv);
  if (untied) overrides.tie_embeddings = false;
  torch::set_num_threads(1);
  absl::StatusOr<posbias::models::ModelConfig> base;
  if (!checkpoint.empty()) {
    std::ifstream in(checkpoint + "/config.json");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    base = posbias::models::ConfigFromHuggingFaceJson(text);
  } else {
    base = preset.empty() ? posbias::models::FamilyConfig(arch) : posbias::models::PresetConfig(preset);
  }
  if (!base.ok()) return std::cerr << base.status() << "\n", 2;
  auto config = posbias::models::ApplyOverrides(*base, overrides);
  config.ablations = ablations;
  auto model = posbias::models::BuildModel(config, seed);
  if (!model.ok()) return std::cerr << model.status() << "\n", 2;
  if (!checkpoint.empty()) {
    if (auto s = posbias::models::LoadWeightsFromPath(**model, checkpoint); !s.ok()) return std::cerr << s << "\n", 2;
  }
  if (!weights_out.empty()) {
    if (auto s = posbias::models::ExportWeights(**model, weights_out); !s.ok()) return std::cerr << s << "\n", 1;
  }
  if (!config_out.empty()) std::ofstream(config_out) << posbias::models::ConfigToHuggingFaceJson(config) << "\n";
  if (float64) (*model)->To(torch::kCPU, torch::kFloat64);

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
  if (float64) options.dtype = torch::kFloat64;
  auto result = posbias::jacobian::Measure(**model, options);
  if (!result.ok()) return std::cerr << result.status() << "\n", 1;
  std::vector<double> flat;
  for (const auto& sample : result->raw[0]) flat.insert(flat.end(), sample.begin(), sample.end());
  auto norms = torch::tensor(flat, torch::kFloat64).view({ids.size(0), ids.size(1)})
                   .to(float64 ? torch::kFloat64 : torch::kFloat32).contiguous();
  auto status = posbias::safetensors::WriteFile(
      out, {Entry("embeddings", embeddings), Entry("hidden", hidden), Entry("logits", logits),
            Entry("jacobian_sq_norms", norms)}, {});
  if (!status.ok()) return std::cerr << status << "\n", 1;
  return 0;
}
