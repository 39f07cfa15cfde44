// posbias-measure: one Jacobian-norm measurement from flags, written as JSON. The engine's driver
// and benchmark harness; needs LibTorch but neither gRPC nor a server.
//
//   posbias-measure --arch qwen2 --layers 4 --width 128 --heads 4 --kv-heads 2 --mlp-width 256
//       --vocab 1000 --length 64 --samples 4 --method exact --format json
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>

#include <torch/torch.h>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/host/memory.h"
#include "server/jacobian/allocator.h"
#include "server/jacobian/engine.h"
#include "server/measure/theory_report.h"
#include "server/models/weights.h"

namespace {

struct Flags {
  std::string arch = "gpt2";
  std::string preset;
  posbias::models::ConfigOverrides overrides;
  posbias::models::Ablations ablations;
  uint64_t model_seed = 0;
  std::string weights, export_weights, export_config, torchscript, tokens_file;
  posbias::jacobian::MeasureOptions options;
  std::string method = "exact", output = "final", input = "random", dtype = "float32", format = "json";
  int threads = 0;
  int64_t memory_budget_mb = 2048;
  std::string checkpointing = "auto", reverse_pass = "auto", pathway = "full";
  std::string probe_distribution{posbias::jobs::ProbeDistributionName(posbias::jobs::kDefaultProbeDistribution)};
  bool arch_given = false;
};

void DefineFlags(CLI::App& app, Flags& f) {
  app.add_option("--arch", f.arch, posbias::models::BuiltFamiliesText())
      ->check(CLI::IsMember(posbias::models::BuiltFamilyNames()))->capture_default_str();
  app.add_option("--preset", f.preset,
                 "A preset (gpt2, gpt2-medium, ..., qwen2-0.5b, qwen2-1.5b, llama3.2-1b, tinyllama-1.1b, mistral-7b, "
                 "pythia-70m, ..., pythia-1b, gpt2-tiny, qwen2-tiny, llama-tiny, mistral-tiny, pythia-tiny, cesaro)");
  app.add_option("--layers", f.overrides.num_layers, "Number of layers H");
  app.add_option("--width", f.overrides.hidden_size, "Hidden size d");
  app.add_option("--heads", f.overrides.num_heads, "Attention heads");
  app.add_option("--kv-heads", f.overrides.num_kv_heads, "Key/value heads (qwen2)");
  app.add_option("--head-dim", f.overrides.head_dim,
                 "A head's width (llama; default: the preset's, or width / heads once --width or --heads is given)");
  app.add_option("--mlp-width", f.overrides.intermediate_size, "MLP width");
  app.add_option("--vocab", f.overrides.vocab_size, "Vocabulary size");
  app.add_option("--max-positions", f.overrides.max_positions, "Maximum positions");
  app.add_option("--rope-theta", f.overrides.rope_theta, absl::StrCat("Rotary base theta (", posbias::models::RotaryFamiliesText(), ")"));
  app.add_option("--sliding-window", f.overrides.sliding_window, "Attention window w of the sliding layers (0 = full causal)");
  app.add_option("--alpha", f.overrides.cesaro_alpha, "Attention weight of the cesaro architecture");
  app.add_flag("--no-position-encoding", f.ablations.no_position_encoding, "No learned positions / no rotary embedding");
  app.add_flag("--uniform-attention", f.ablations.uniform_attention, "Attention logits forced to zero");
  app.add_flag("--no-mlp", f.ablations.no_mlp, "MLP blocks off");
  app.add_option("--seed", f.model_seed, "Initialization seed (also the input seed unless --input-seed)")->capture_default_str();
  app.add_option("--input-seed", f.options.seed, "Seed of token ids, Gaussian inputs and probes");
  app.add_option("--length,-L", f.options.length, "Sequence length L")->capture_default_str();
  app.add_option("--samples,-S", f.options.samples, "Input samples S")->capture_default_str();
  app.add_option("--target", f.options.target, "Output position t (1-based; 0 = L)")->capture_default_str();
  app.add_option("--method", f.method, "exact or hutchinson")->check(CLI::IsMember({"exact", "hutchinson"}))->capture_default_str();
  app.add_option("--probes", f.options.probes, "Hutchinson probes K")->capture_default_str();
  app.add_option("--probe-distribution", f.probe_distribution,
                 "gaussian, rademacher or orthogonal (blocks of d orthonormal rows scaled by sqrt(d): K = d is exact)")
      ->check(CLI::IsMember({"gaussian", "rademacher", "orthogonal"}))->capture_default_str();
  app.add_option("--output", f.output,
                 "final (hidden after final norm), layers (every layer), logprob, or loss (the gradient of the "
                 "next-token loss over the sample)")
      ->check(CLI::IsMember({"final", "layers", "logprob", "loss"}))->capture_default_str();
  app.add_option("--input", f.input, "random (token ids) or gaussian (embeddings)")
      ->check(CLI::IsMember({"random", "gaussian"}))->capture_default_str();
  app.add_option("--tokens", f.tokens_file, "JSON list of token id lists (one per sample)");
  app.add_option("--device", f.options.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--dtype", f.dtype, "float32, bfloat16, float16 or float64")->capture_default_str();
  app.add_option("--cotangent-batch", f.options.cotangent_batch, "Rows per backward pass (0: from memory)");
  app.add_option("--threads", f.threads, "Intra-op threads (0: all cores)");
  app.add_option("--memory-budget-mb", f.memory_budget_mb, "Memory for activations, MiB (sizes the cotangent batch)");
  app.add_option("--checkpointing", f.checkpointing, "auto, on or off: recompute layers in the backward pass")
      ->check(CLI::IsMember({"auto", "on", "off"}))->capture_default_str();
  app.add_option("--reverse-pass", f.reverse_pass,
                 "auto, model or autograd: the model's own batched reverse pass (every decoder family) or autograd")
      ->check(CLI::IsMember({"auto", "model", "autograd"}))->capture_default_str();
  app.add_option("--pathway", f.pathway,
                 "full or value-only: value-only holds the attention probabilities fixed (no gradient "
                 "through the attention scores)")
      ->check(CLI::IsMember({"full", "value-only"}))->capture_default_str();
  app.add_flag("--compare-pathways", f.options.compare_pathways,
               "Measure each sample both ways and report ||J_value||^2 / ||J_full||^2 per position");
  app.add_option("--weights", f.weights,
                 "Load a safetensors checkpoint (file, directory or index); a directory's config.json "
                 "defines the architecture unless --arch or --preset is given");
  app.add_option("--torchscript", f.torchscript, "Load a TorchScript module (needs --width)");
  app.add_option("--export-weights", f.export_weights, "Write the model's weights (Hugging Face names)");
  app.add_option("--export-config", f.export_config, "Write the model's Hugging Face config.json");
  app.add_flag("--raw", f.options.keep_samples, "Include per-sample squared norms");
  app.add_option("--format", f.format, "json")->check(CLI::IsMember({"json"}))->capture_default_str();
}

int Fail(const absl::Status& status) {
  std::cerr << "posbias-measure: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// The architecture: a checkpoint directory's config.json unless --arch or --preset is given,
// else the preset, else the family's base shape; then the flag overrides and ablations.
absl::StatusOr<posbias::models::ModelConfig> ResolveConfig(const Flags& f) {
  using namespace posbias::models;
  absl::StatusOr<ModelConfig> base;
  const auto config_json = std::filesystem::path(f.weights) / "config.json";
  if (!f.weights.empty() && !f.arch_given && f.preset.empty() && std::filesystem::is_regular_file(config_json)) {
    std::ifstream in(config_json);
    base = ConfigFromHuggingFaceJson(std::string(std::istreambuf_iterator<char>(in), {}));
  } else {
    base = f.preset.empty() ? FamilyConfig(f.arch) : PresetConfig(f.preset);
  }
  if (!base.ok()) return base.status();
  // A checkpoint's config.json is its shape; a family or a preset is resized by the flags.
  const bool from_checkpoint = !f.weights.empty() && !f.arch_given && f.preset.empty() &&
                               std::filesystem::is_regular_file(config_json);
  ModelConfig config = from_checkpoint ? ApplyOverrides(*base, f.overrides) : ApplyShapeOverrides(*base, f.overrides);
  config.ablations = f.ablations;
  return config;
}

absl::StatusOr<std::unique_ptr<posbias::models::DecoderModel>> MakeModel(const Flags& f) {
  using namespace posbias::models;
  if (!f.torchscript.empty()) return LoadTorchScriptModel(f.torchscript, f.overrides.hidden_size.value_or(0));
  auto config = ResolveConfig(f);
  if (!config.ok()) return config.status();
  std::cerr << "model " << ShapeSummary(*config) << "\n";
  auto model = BuildModel(*config, f.model_seed);
  if (!model.ok() || f.weights.empty()) return model;
  if (auto status = LoadWeightsFromPath(**model, f.weights); !status.ok()) return status;
  return model;
}

absl::Status ReadTokens(const std::string& path, posbias::jacobian::MeasureOptions& options) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("cannot read --tokens " + path);
  const auto json = nlohmann::json::parse(in, nullptr, false);
  if (json.is_discarded() || !json.is_array()) return absl::InvalidArgumentError("--tokens: expected a JSON list of token id lists");
  try {
    options.tokens = json.get<std::vector<std::vector<int64_t>>>();
  } catch (const nlohmann::json::exception&) {
    return absl::InvalidArgumentError("--tokens: expected a JSON list of lists of integers");
  }
  options.input = posbias::jacobian::InputKind::kGivenTokens;
  options.samples = static_cast<int64_t>(options.tokens.size());
  return absl::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"posbias-measure: per-position Jacobian norms of a decoder, as JSON"};
  Flags f;
  DefineFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  if (app.count("--input-seed") == 0) f.options.seed = f.model_seed;
  f.arch_given = app.count("--arch") > 0;
  f.options.memory_budget_bytes = f.memory_budget_mb << 20;
  using Checkpointing = posbias::jacobian::MeasureOptions::Checkpointing;
  f.options.checkpointing = f.checkpointing == "on" ? Checkpointing::kOn
                            : f.checkpointing == "off" ? Checkpointing::kOff : Checkpointing::kAuto;
  using ReversePass = posbias::jacobian::MeasureOptions::ReversePass;
  f.options.reverse_pass = f.reverse_pass == "model" ? ReversePass::kModel
                           : f.reverse_pass == "autograd" ? ReversePass::kAutograd : ReversePass::kAuto;
  if (f.threads > 0) torch::set_num_threads(f.threads);
  posbias::jacobian::RetainFreedMemoryDuringMeasurements();
  using posbias::jacobian::Output, posbias::jacobian::InputKind;
  f.options.method = *posbias::jobs::ParseMethod(f.method);  // The flag allows only the two names.
  f.options.pathway = *posbias::jobs::ParsePathway(f.pathway);  // Likewise.
  f.options.probe_distribution = *posbias::jobs::ParseProbeDistribution(f.probe_distribution);  // Likewise.
  f.options.output = f.output == "layers"    ? Output::kLayerSweep
                     : f.output == "logprob" ? Output::kLogProb
                     : f.output == "loss"    ? Output::kLossGradient
                                             : Output::kFinalHidden;
  f.options.input = f.input == "gaussian" ? InputKind::kGaussianEmbeddings : InputKind::kRandomTokens;
  auto dtype = posbias::jobs::ParseDtype(f.dtype);
  if (!dtype.ok()) return Fail(dtype.status());
  f.options.dtype = posbias::jacobian::TorchDtype(*dtype);
  if (!f.tokens_file.empty()) {
    if (auto status = ReadTokens(f.tokens_file, f.options); !status.ok()) return Fail(status);
  }
  // The measured peak is the resident memory's high-water mark above what the process holds once
  // torch's thread pools and the BLAS's packing buffers have started (products large enough to
  // fill the buffers, in both dtypes the CPU measures in), before the model is built.
  for (const auto warm_dtype : {torch::kFloat32, torch::kFloat64}) {
    auto square = torch::ones({1024, 1024}, warm_dtype);
    (void)torch::mm(square, square).sum();
  }
  const int64_t resident_before = posbias::host::ReadProcessMemory().resident_bytes;
  const bool peak_known = posbias::host::ResetPeakResidentMemory();
  auto model = MakeModel(f);
  if (!model.ok()) return Fail(model.status());
  if (!f.export_weights.empty()) {
    if (auto status = posbias::models::ExportWeights(**model, f.export_weights); !status.ok()) return Fail(status);
  }
  if (!f.export_config.empty()) {
    std::ofstream(f.export_config) << posbias::models::ConfigToHuggingFaceJson((*model)->config()) << "\n";
  }
  auto result = posbias::jacobian::Measure(**model, f.options);
  if (!result.ok()) return Fail(result.status());
  const int64_t peak = posbias::host::ReadProcessMemory().peak_resident_bytes;
  const auto report = posbias::measure::BuildReport(**model, f.options, *result, f.weights.empty() ? f.torchscript : f.weights);
  auto json = posbias::jobs::ReportToJson(report);
  const auto& predicted = result->predicted_memory;
  json["memory"] = {{"predicted_peak_bytes", predicted.total()},
                    {"predicted_weights_bytes", predicted.weights},
                    {"predicted_inputs_bytes", predicted.inputs},
                    {"predicted_activations_bytes", predicted.activations},
                    {"predicted_transient_bytes", predicted.transient},
                    {"measured_peak_bytes", peak_known && peak > 0 && resident_before > 0
                                                ? nlohmann::ordered_json(peak - resident_before) : nlohmann::ordered_json(nullptr)}};
  // The matrix products' FLOPs the model's pass did (flop_count.h) and the rate achieved over the
  // measurement's seconds: the forward and the rows' reverse are the work required, recomputation
  // apart. Null through autograd (not counted).
  if (const auto& flops = result->predicted_flops) {
    const double seconds = result->seconds > 0 ? result->seconds : 0.0;
    json["work"] = {{"flops_required", flops->required()},
                    {"flops_forward", flops->forward},
                    {"flops_reverse", flops->reverse},
                    {"flops_recomputed", flops->recompute},
                    {"achieved_gflops_per_second", seconds > 0 ? nlohmann::ordered_json(flops->required() / seconds / 1e9)
                                                               : nlohmann::ordered_json(nullptr)}};
  } else {
    json["work"] = nullptr;
  }
  std::cout << json.dump(2) << "\n";
  return 0;
}
