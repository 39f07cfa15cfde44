// posbias-train: next-token training of a model-zoo family from its seeded initialization, with
// step checkpoints in Hugging Face form (trainer.h). Flags in, a JSON summary out.
//
//   posbias-train --preset llama-tiny --data corpus/ --length 64 --steps 500 --batch-size 16
//       --lr 3e-3 --warmup-steps 50 --save-steps 0,100 --out runs/llama-tiny
#include <iostream>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/models/config.h"
#include "server/train/byte_tokenizer.h"
#include "server/train/position_weights.h"
#include "server/train/trainer.h"

namespace {

struct Flags {
  std::string arch = "gpt2";
  std::string preset;
  posbias::models::ConfigOverrides overrides;
  posbias::train::TrainOptions options;
  std::vector<double> betas{0.9, 0.95};
  std::string position_weighting = "none", position_weights_file;
  std::string task = "text", placement = "uniform";
  std::vector<int64_t> key_ids{128, 192}, value_ids{192, 256}, filler_ids{32, 127};
  bool progress = false, quiet = false;
};

void DefineModelFlags(CLI::App& app, Flags& f) {
  app.add_option("--arch", f.arch, posbias::models::BuiltFamiliesText() + " (not cesaro: it has no parameters)")
      ->check(CLI::IsMember(posbias::models::BuiltFamilyNames()))->capture_default_str();
  app.add_option("--preset", f.preset, "A preset of posbias-measure (gpt2-tiny, llama-tiny, qwen2-tiny, pythia-tiny, ...)");
  app.add_option("--layers", f.overrides.num_layers, "Number of layers H");
  app.add_option("--width", f.overrides.hidden_size, "Hidden size d");
  app.add_option("--heads", f.overrides.num_heads, "Attention heads");
  app.add_option("--kv-heads", f.overrides.num_kv_heads, "Key/value heads (qwen2, llama, mistral)");
  app.add_option("--head-dim", f.overrides.head_dim,
                 "A head's width (llama; default: the preset's, or width / heads once --width or --heads is given)");
  app.add_option("--mlp-width", f.overrides.intermediate_size, "MLP width");
  app.add_option("--vocab", f.overrides.vocab_size, "Vocabulary size (default: 257 with the byte-level tokenizer)");
  app.add_option("--max-positions", f.overrides.max_positions, "Maximum positions");
  app.add_option("--rope-theta", f.overrides.rope_theta, absl::StrCat("Rotary base theta (", posbias::models::RotaryFamiliesText(), ")"));
  app.add_option("--sliding-window", f.overrides.sliding_window, "Attention window w of the sliding layers (0 = full causal)");
  app.add_option("--seed", f.options.seed, "Seed of the initialization, the held-out split and the data order")
      ->capture_default_str();
}

void DefineDataFlags(CLI::App& app, Flags& f) {
  auto& o = f.options;
  app.add_option("--task", f.task, "text: next-token prediction on --data; recall: multi-query associative recall "
                 "on token ids (no corpus; the defaults of --steps, --batch-size, --lr and --warmup-steps become "
                 "its recipe)")->check(CLI::IsMember({"text", "recall"}))->capture_default_str();
  app.add_option("--data", o.data_paths, "A text file (one document), a .jsonl file (a \"text\" per line) or a "
                 "directory of such files; repeatable (--task text)");
  app.add_option("--tokenizer", o.tokenizer_dir, "Directory with tokenizer.json or vocab.json + merges.txt "
                 "(default: a byte-level tokenizer written to <out>/tokenizer)");
  app.add_option("--eos-token", o.eos_token, "Token between documents (default: the tokenizer's EOS, <|endoftext|>)");
  app.add_option("--length,-L", o.length, "Input tokens per training sequence L")->capture_default_str();
  app.add_option("--eval-fraction", o.eval_fraction, "Share of sequences held out for the eval loss")->capture_default_str();
  app.add_option("--max-eval-sequences", o.max_eval_sequences, "Held-out sequences evaluated at each save")->capture_default_str();
  app.add_option("--recall-fraction", o.recall_fraction,
                 "Share of training sequences replaced by associative-recall probes (key=value pairs, then a "
                 "query key; the answer its value), each at a uniform depth")->capture_default_str();
  app.add_option("--recall-pairs", o.recall.pairs, "key=value pairs per recall probe")->capture_default_str();
  app.add_option("--recall-values", o.recall.values, "The recall values' alphabet (chance accuracy = 1 / its size)")
      ->capture_default_str();
  app.add_option("--key-ids", f.key_ids, "--task recall: the keys' token ids FIRST,LAST (LAST excluded)")
      ->expected(2)->delimiter(',')->capture_default_str();
  app.add_option("--value-ids", f.value_ids, "--task recall: the values' token ids FIRST,LAST (chance = 1 / their count)")
      ->expected(2)->delimiter(',')->capture_default_str();
  app.add_option("--filler-ids", f.filler_ids, "--task recall: the filler's token ids FIRST,LAST")
      ->expected(2)->delimiter(',')->capture_default_str();
  app.add_option("--recall-placement", f.placement, "--task recall: where the training rows' pairs sit before their "
                 "queries: uniform; near-query (weighted 1 / the distance); middle (depths 0.1..0.9 weighted "
                 "--recall-middle-factor: the needle-placement cure as data)")->capture_default_str();
  app.add_option("--recall-middle-factor", f.options.mqar.middle_factor,
                 "--task recall, --recall-placement middle: how many times as often as uniform")->capture_default_str();
  app.add_option("--recall-rest-weight", o.recall_rest_weight,
                 "--task recall: loss weight of the targets that are not answers (answers: 1)")->capture_default_str();
  app.add_option("--probes-per-depth", o.probes_per_depth,
                 "--task recall: held-out probes at each of the depths 0, 0.1, .., 1 at every save")->capture_default_str();
}

void DefineOptimizerFlags(CLI::App& app, Flags& f) {
  auto& o = f.options;
  app.add_option("--steps", o.steps, "Updates")->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "Sequences per update")->capture_default_str();
  app.add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  app.add_option("--min-lr-ratio", o.min_lr_ratio, "Final learning rate of the cosine decay / peak")->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps, "Updates of linear warm-up")->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "AdamW weight decay (matrices and embeddings)")->capture_default_str();
  app.add_option("--betas", f.betas, "AdamW beta1,beta2")->expected(2)->delimiter(',')->capture_default_str();
  app.add_option("--clip", o.clip, "Maximum global gradient norm (0: no clipping)")->capture_default_str();
  app.add_option("--position-weighting", f.position_weighting,
                 "none, or inverse-rho: loss weight of target t proportional to 1 / (row L of N^H)_t")
      ->check(CLI::IsMember({"none", "inverse-rho"}))->capture_default_str();
  app.add_option("--rho-alpha", o.position_weights.rho_alpha, "alpha of the routing row for inverse-rho")->capture_default_str();
  app.add_option("--position-weights", f.position_weights_file, "JSON list of L loss weights (instead of --position-weighting)");
  app.add_option("--middle-oversampling", o.position_weights.middle_oversampling,
                 "Weight factor F >= 1 of targets in the middle 80 % of positions")->capture_default_str();
}

void DefineOutputFlags(CLI::App& app, Flags& f) {
  auto& o = f.options;
  app.add_option("--out", o.out_dir, "Output directory: step<N>/ checkpoints and loss.json")->required();
  app.add_option("--save-steps", o.save_steps, "Steps to save, e.g. 0,100,500 (the last step always is)")->delimiter(',');
  app.add_flag("--resume", o.resume, "Continue from the latest step<N> in --out");
  app.add_option("--stop-after", o.stop_after_step, "Stop (and save) after this update, as if interrupted (0: never)");
  app.add_option("--device", o.device, "cpu or cuda:N")->capture_default_str();
  app.add_option("--dtype", o.dtype, "float32, float64, bfloat16 or float16")->capture_default_str();
  app.add_option("--threads", o.threads, "Intra-op CPU threads (0: torch's default)");
  app.add_flag("--progress", f.progress, "Show the progress bar also when stderr is not a terminal");
  app.add_flag("--quiet", f.quiet, "No progress bar and no notes on stderr");
}

int Fail(const absl::Status& status) {
  std::cerr << "posbias-train: " << status.message() << "\n";
  return status.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
}

// The model, position-weight and output choices the flags name, into the options.
absl::Status Resolve(const CLI::App& app, Flags& f) {
  using namespace posbias;
  auto task = train::ParseTask(f.task);
  if (!task.ok()) return task.status();
  auto& o = f.options;
  o.task = *task;
  o.mqar.pairs = o.recall.pairs;
  o.mqar.keys = {f.key_ids[0], f.key_ids[1]};
  o.mqar.values = {f.value_ids[0], f.value_ids[1]};
  o.mqar.filler = {f.filler_ids[0], f.filler_ids[1]};
  if (auto status = recall::ParsePlacement(f.placement, o.mqar.placement); !status.ok()) return status;
  if (o.task == train::Task::kRecall) {  // The task's recipe where the flags are not given.
    using Recipe = train::RecallRecipe;
    if (app.count("--steps") == 0) o.steps = Recipe::kSteps;
    if (app.count("--batch-size") == 0) o.batch_size = Recipe::kBatchSize;
    if (app.count("--lr") == 0) o.lr = Recipe::kLr;
    if (app.count("--warmup-steps") == 0) o.warmup_steps = std::min(Recipe::kWarmupSteps, o.steps);
    if (app.count("--weight-decay") == 0) o.weight_decay = Recipe::kWeightDecay;
  }
  auto base = f.preset.empty() ? models::FamilyConfig(f.arch) : models::PresetConfig(f.preset);
  if (!base.ok()) return base.status();
  f.options.model = models::ApplyShapeOverrides(*base, f.overrides);
  f.options.vocab_given = app.count("--vocab") > 0;
  // The byte-level tokenizer's vocabulary, as Train resolves it, so that the printed shape is the one built.
  if (!f.options.vocab_given && f.options.tokenizer_dir.empty()) f.options.model.vocab_size = train::kByteLevelVocabSize;
  f.options.beta1 = f.betas[0];
  f.options.beta2 = f.betas[1];
  auto weighting = train::ParsePositionWeighting(f.position_weighting);
  if (!weighting.ok()) return weighting.status();
  f.options.position_weights.weighting = *weighting;
  if (!f.position_weights_file.empty()) {
    auto weights = train::ReadPositionWeightsFile(f.position_weights_file);
    if (!weights.ok()) return weights.status();
    f.options.position_weights.explicit_weights = *std::move(weights);
  }
  using Progress = train::TrainOptions::Progress;
  f.options.progress = f.quiet ? Progress::kOff : f.progress ? Progress::kOn : Progress::kAuto;
  f.options.log = f.quiet ? nullptr : &std::cerr;
  return absl::OkStatus();
}

nlohmann::ordered_json Summary(const posbias::train::TrainResult& result, const std::string& out_dir) {
  nlohmann::ordered_json summary = {{"out", out_dir}, {"first_step", result.first_step}, {"last_step", result.last_step},
                                    {"unigram_entropy_nats", result.unigram_entropy_nats},
                                    {"train_sequences", result.train_sequences}, {"eval_sequences", result.eval_sequences}};
  if (!result.steps.empty()) summary["final_loss"] = result.steps.back().loss;
  if (!result.evals.empty()) summary["final_eval_loss"] = result.evals.back().loss;
  if (!result.evals.empty() && result.evals.back().accuracy >= 0) summary["final_recall_accuracy"] = result.evals.back().accuracy;
  return summary;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"posbias-train: next-token training of a model-zoo family from its seeded initialization"};
  Flags f;
  DefineModelFlags(app, f);
  DefineDataFlags(app, f);
  DefineOptimizerFlags(app, f);
  DefineOutputFlags(app, f);
  CLI11_PARSE(app, argc, argv);
  if (auto status = Resolve(app, f); !status.ok()) return Fail(status);
  if (!f.quiet) std::cerr << "model " << posbias::models::ShapeSummary(f.options.model) << "\n";
  auto result = posbias::train::Train(f.options);
  if (!result.ok()) return Fail(result.status());
  std::cout << Summary(*result, f.options.out_dir).dump(2) << "\n";
  return 0;
}
