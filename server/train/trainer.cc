// The training run (trainer.h): options checked, data prepared, the model built and trained.
#include "server/train/trainer.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <regex>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"
#include "server/tokenizer/tokenizer.h"
#include "server/train/byte_tokenizer.h"
#include "server/train/checkpoint.h"
#include "server/train/corpus.h"
#include "server/train/lr_schedule.h"
#include "server/train/progress.h"
#include "server/train/training_data.h"

namespace posbias::train {
namespace {

namespace fs = std::filesystem;

absl::Status FlagError(const std::string& flag, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, flag, value, allowed});
}

absl::StatusOr<torch::Dtype> ParseDtype(const std::string& name) {
  if (name == "float32") return torch::kFloat32;
  if (name == "float64") return torch::kFloat64;
  if (name == "bfloat16") return torch::kBFloat16;
  if (name == "float16") return torch::kFloat16;
  return FlagError("--dtype", name, "float32, float64, bfloat16 or float16");
}

absl::StatusOr<torch::Device> ParseDevice(const std::string& name) {
  if (name == "cpu") return torch::Device(torch::kCPU);
  static const std::regex kCuda("cuda(:([0-9]{1,3}))?");
  std::smatch match;
  const int64_t gpus = torch::cuda::is_available() ? static_cast<int64_t>(torch::cuda::device_count()) : 0;
  const std::string allowed = gpus == 0 ? "cpu (this machine has no CUDA device)"
                                        : absl::StrCat("cpu or cuda:0 .. cuda:", gpus - 1);
  if (!std::regex_match(name, match, kCuda)) return FlagError("--device", name, allowed);
  const int64_t index = match[2].matched ? std::stoll(match[2].str()) : 0;
  if (index >= gpus) return FlagError("--device", name, allowed);
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

// The optimization's numbers (ValidateOptions' second half).
absl::Status ValidateOptimization(const TrainOptions& o) {
  if (o.steps < 1) return FlagError("--steps", absl::StrCat(o.steps), ">= 1");
  if (o.batch_size < 1) return FlagError("--batch-size", absl::StrCat(o.batch_size), ">= 1");
  if (!(o.lr > 0 && std::isfinite(o.lr))) return FlagError("--lr", FormatValue(o.lr), "a finite number > 0");
  if (!(o.min_lr_ratio >= 0 && o.min_lr_ratio <= 1)) return FlagError("--min-lr-ratio", FormatValue(o.min_lr_ratio), "[0, 1]");
  if (o.warmup_steps < 0 || o.warmup_steps > o.steps) {
    return FlagError("--warmup-steps", absl::StrCat(o.warmup_steps), absl::StrCat("[0, --steps = ", o.steps, "]"));
  }
  if (!(o.weight_decay >= 0 && std::isfinite(o.weight_decay))) return FlagError("--weight-decay", FormatValue(o.weight_decay), ">= 0");
  for (const double beta : {o.beta1, o.beta2}) {
    if (!(beta >= 0 && beta < 1)) return FlagError("--betas", FormatValue(beta), "two numbers in [0, 1)");
  }
  if (!(o.clip >= 0 && std::isfinite(o.clip))) return FlagError("--clip", FormatValue(o.clip), ">= 0 (0: no clipping)");
  for (const int64_t step : o.save_steps) {
    if (step < 0 || step > o.steps) {
      return FlagError("--save-steps", absl::StrCat(step), absl::StrCat("steps in [0, --steps = ", o.steps, "]"));
    }
  }
  if (o.stop_after_step < 0 || o.stop_after_step > o.steps) {
    return FlagError("--stop-after", absl::StrCat(o.stop_after_step), absl::StrCat("[0, --steps = ", o.steps, "] (0: never)"));
  }
  return ValidatePositionWeightOptions(o.position_weights);
}

// The recall probes' options at the run's length, checked with a probe at either end (a context
// too short for the pairs is refused here, before any work).
absl::Status ValidateRecall(const TrainOptions& o) {
  if (!(o.recall_fraction >= 0 && o.recall_fraction <= 1)) {
    return FlagError("--recall-fraction", FormatValue(o.recall_fraction), "[0, 1]");
  }
  if (o.recall_fraction == 0) return absl::OkStatus();
  recall::TaskOptions task = o.recall;
  task.length = o.length;
  const recall::Tokenize bytes = [](std::string_view text) -> absl::StatusOr<std::vector<int64_t>> {
    return std::vector<int64_t>(text.begin(), text.end());
  };
  for (const double depth : {0.0, 1.0}) {
    if (auto probe = recall::MakeProbe(task, depth, 0, bytes); !probe.ok()) {
      return FlagError("--recall-pairs", absl::StrCat(task.pairs), std::string(probe.status().message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string TaskJson(const TrainOptions& options) {
  nlohmann::ordered_json task = {{"task", TaskName(options.task)}};
  if (options.task == Task::kRecall) {
    recall::MqarOptions mqar = options.mqar;
    mqar.length = options.length;
    task = recall::MqarTaskJson(mqar);
    task["rest_weight"] = options.recall_rest_weight;
  }
  return task.dump(1) + "\n";
}

std::string TaskName(Task task) { return task == Task::kText ? "text" : "recall"; }

absl::StatusOr<Task> ParseTask(const std::string& name) {
  if (name == "text") return Task::kText;
  if (name == "recall") return Task::kRecall;
  return FlagError("--task", name, "text (next-token prediction on --data) or recall (associative recall on token ids)");
}

absl::Status ValidateOptions(const TrainOptions& o) {
  const auto family = o.model.family;
  if (family == models::Family::kCesaro || family == models::Family::kTorchScript) {
    return FlagError("--arch", models::FamilyName(family), "gpt2, qwen2, llama, mistral or gpt_neox (a family with parameters)");
  }
  if (auto status = models::ValidateConfig(o.model); !status.ok()) return status;
  if (o.task == Task::kText && o.data_paths.empty()) {
    return FlagError("--data", "none", "one or more files or directories (or --task recall, which needs no corpus)");
  }
  if (o.task == Task::kRecall) {
    if (!o.data_paths.empty()) {
      return FlagError("--data", o.data_paths.front(), "no corpus with --task recall (its filler is the --filler-ids)");
    }
    if (o.recall_fraction != 0) {
      return FlagError("--recall-fraction", FormatValue(o.recall_fraction), "0 with --task recall (every row is a recall row)");
    }
    if (!(o.recall_rest_weight >= 0 && o.recall_rest_weight <= 1)) {
      return FlagError("--recall-rest-weight", FormatValue(o.recall_rest_weight), "[0, 1]");
    }
    if (o.probes_per_depth < 1) return FlagError("--probes-per-depth", absl::StrCat(o.probes_per_depth), ">= 1");
  }
  if (o.out_dir.empty()) return FlagError("--out", "none", "a directory for the checkpoints and loss.json");
  if (o.length < 2 || o.length > o.model.max_positions) {
    return FlagError("--length", absl::StrCat(o.length), absl::StrCat("[2, the model's --max-positions = ", o.model.max_positions, "]"));
  }
  if (!(o.eval_fraction >= 0 && o.eval_fraction <= 0.5)) return FlagError("--eval-fraction", FormatValue(o.eval_fraction), "[0, 0.5]");
  if (o.max_eval_sequences < 1) return FlagError("--max-eval-sequences", absl::StrCat(o.max_eval_sequences), ">= 1");
  if (o.threads < 0) return FlagError("--threads", absl::StrCat(o.threads), ">= 0 (0: torch's default)");
  if (auto dtype = ParseDtype(o.dtype); !dtype.ok()) return dtype.status();
  if (auto device = ParseDevice(o.device); !device.ok()) return device.status();
  if (!o.position_weights.explicit_weights.empty() &&
      static_cast<int64_t>(o.position_weights.explicit_weights.size()) != o.length) {
    return FlagError("--position-weights", absl::StrCat(o.position_weights.explicit_weights.size(), " numbers"),
                     absl::StrCat("exactly --length = ", o.length, " numbers"));
  }
  if (auto status = ValidateRecall(o); !status.ok()) return status;
  return ValidateOptimization(o);
}

namespace {

// One run: the model, its optimizer and the records, from Setup (and Resume) through Run.
class Trainer {
 public:
  Trainer(const TrainOptions& options, TrainingData data, torch::Device device, torch::Dtype dtype)
      : options_(options), data_(std::move(data)), device_(device), dtype_(dtype) {}

  absl::Status Setup(const models::ModelConfig& config);
  absl::Status Resume();
  absl::Status Run();
  TrainResult TakeResult() { return std::move(result_); }

 private:
  struct Batch {
    std::vector<torch::Tensor> rows;  // L + 1 ids each.
    torch::Tensor answers;            // --task recall: [B, L] float32, 1 at the answers' targets.
  };
  std::vector<int64_t> BatchSequences(int64_t step);
  std::vector<torch::Tensor> BatchRows(int64_t step);
  Batch RecallBatch(int64_t step) const;
  recall::MqarOptions Mqar() const {
    recall::MqarOptions mqar = options_.mqar;
    mqar.length = options_.length;
    return mqar;
  }
  EvalRecord EvaluateRecall(int64_t step);
  torch::Tensor CorpusRow(int64_t sequence) const;
  // The cross-entropy of every target, [B, L]; the logits [B, L, V] into *logits_out when given.
  torch::Tensor TokenLosses(const std::vector<torch::Tensor>& rows, torch::Tensor* logits_out = nullptr);
  StepRecord Step(int64_t step);
  EvalRecord Evaluate(int64_t step);
  TrainerState StateAfter(int64_t step) const;
  absl::Status Save(int64_t step);
  bool Saves(int64_t step) const;
  void Note(const std::string& line) const {
    if (options_.log != nullptr) *options_.log << "posbias-train: " << line << "\n" << std::flush;
  }

  const TrainOptions& options_;
  TrainingData data_;
  torch::Device device_;
  torch::Dtype dtype_;
  std::shared_ptr<models::DecoderModel> model_;
  std::vector<torch::Tensor> parameters_;
  std::unique_ptr<torch::optim::AdamW> optimizer_;
  torch::Tensor tokens_;   // The corpus stream, int64 on the CPU.
  torch::Tensor weights_;  // [L] loss weights on the device (float32), undefined when all 1.
  LrSchedule schedule_;
  int64_t cached_epoch_ = -1;
  std::vector<int64_t> epoch_order_;
  TrainResult result_;
};

absl::Status Trainer::Setup(const models::ModelConfig& config) {
  torch::manual_seed(options_.seed);
  auto model = models::BuildModel(config, options_.seed);
  if (!model.ok()) return model.status();
  model_ = std::shared_ptr<models::DecoderModel>(std::move(*model));
  model_->To(device_, dtype_);
  std::vector<torch::Tensor> decayed, kept;
  for (auto& [name, tensor] : model_->NamedParameters()) {
    tensor.set_requires_grad(true);
    parameters_.push_back(tensor);
    (tensor.dim() >= 2 ? decayed : kept).push_back(tensor);
  }
  auto group_options = [&](double decay) {
    auto adamw = std::make_unique<torch::optim::AdamWOptions>(options_.lr);
    adamw->betas(std::make_tuple(options_.beta1, options_.beta2)).weight_decay(decay);
    return adamw;
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decayed, group_options(options_.weight_decay));
  if (!kept.empty()) groups.emplace_back(kept, group_options(0.0));
  optimizer_ = std::make_unique<torch::optim::AdamW>(groups, torch::optim::AdamWOptions(options_.lr));
  auto position_weights = PositionLossWeights(options_.position_weights, options_.length, config.num_layers);
  if (!position_weights.ok()) return position_weights.status();
  result_.position_weights = *position_weights;
  if (std::any_of(position_weights->begin(), position_weights->end(), [](double w) { return w != 1.0; })) {
    weights_ = torch::tensor(*position_weights, torch::kFloat64).to(device_, torch::kFloat32);
  }
  auto& stream = data_.stream.tokens;
  tokens_ = stream.empty() ? torch::zeros({0}, torch::kLong)
                           : torch::from_blob(stream.data(), {static_cast<int64_t>(stream.size())}, torch::kLong).clone();
  schedule_ = {options_.lr, options_.warmup_steps, options_.steps, options_.min_lr_ratio};
  result_.config = config;
  result_.model = model_;
  result_.unigram_entropy_nats = data_.unigram_entropy_nats;
  result_.train_sequences = static_cast<int64_t>(data_.split.train.size());
  result_.eval_sequences = static_cast<int64_t>(data_.split.eval.size());
  result_.documents = data_.stream.documents;
  result_.corpus_tokens = static_cast<int64_t>(stream.size());
  return absl::OkStatus();
}

absl::Status Trainer::Resume() {
  auto dir = LatestCheckpoint(options_.out_dir);
  if (!dir.ok()) return dir.status();
  auto state = ReadTrainerState(*dir);
  if (!state.ok()) return state.status();
  const auto expected = StateAfter(state->step);
  const auto mismatch = [&](const std::string& what, const std::string& had) {
    return FlagError("--resume", *dir, absl::StrCat("a checkpoint of the same run; it was trained with ", what, " ", had));
  };
  if (state->seed != options_.seed) return mismatch("--seed", absl::StrCat(state->seed));
  if (state->length != options_.length) return mismatch("--length", absl::StrCat(state->length));
  if (state->batch_size != options_.batch_size) return mismatch("--batch-size", absl::StrCat(state->batch_size));
  if (state->steps != options_.steps) return mismatch("--steps", absl::StrCat(state->steps));
  if (nlohmann::json::parse(state->config_json) != nlohmann::json::parse(expected.config_json)) {
    return mismatch("the model", state->config_json);
  }
  if (auto status = LoadTrainingState(*dir, *model_, *optimizer_); !status.ok()) return status;
  if (auto status = ReadLossLog(options_.out_dir, state->step, result_); !status.ok()) return status;
  result_.first_step = result_.last_step = state->step;
  Note(absl::StrCat("resuming from ", *dir));
  return absl::OkStatus();
}

// Update `step` trains on positions (step - 1) B .. step B - 1 of the epochs' orders laid end to end.
std::vector<int64_t> Trainer::BatchSequences(int64_t step) {
  const auto& train = data_.split.train;
  const auto count = static_cast<int64_t>(train.size());
  std::vector<int64_t> sequences;
  for (int64_t i = 0; i < options_.batch_size; ++i) {
    const int64_t position = (step - 1) * options_.batch_size + i;
    const int64_t epoch = position / count;
    if (epoch != cached_epoch_) {
      epoch_order_ = SeededPermutation(count, options_.seed, static_cast<uint64_t>(epoch) + 1);
      cached_epoch_ = epoch;
    }
    sequences.push_back(train[epoch_order_[position % count]]);
  }
  return sequences;
}

torch::Tensor Trainer::CorpusRow(int64_t sequence) const {
  return tokens_.narrow(0, sequence * options_.length, options_.length + 1);
}

// Update `step`'s rows of L + 1 ids: the corpus's sequences, each position of the data order
// drawn for recall (probability --recall-fraction, from the seed and the position) taking a
// recall probe at a uniform depth instead.
std::vector<torch::Tensor> Trainer::BatchRows(int64_t step) {
  const std::vector<int64_t> sequences = BatchSequences(step);
  std::vector<torch::Tensor> rows;
  recall::TaskOptions task = options_.recall;
  task.length = options_.length;
  const recall::Tokenize tokenize = [&](std::string_view text) -> absl::StatusOr<std::vector<int64_t>> {
    auto encoding = data_.tokenizer->Encode(text);
    if (!encoding.ok()) return encoding.status();
    return std::vector<int64_t>(encoding->ids.begin(), encoding->ids.end());
  };
  for (size_t i = 0; i < sequences.size(); ++i) {
    const auto position = static_cast<uint64_t>((step - 1) * options_.batch_size + static_cast<int64_t>(i));
    const uint64_t draw = recall::ProbeSeed(options_.seed ^ 0x5245434C4CULL, position);  // "RECALL".
    const double u = static_cast<double>(draw >> 11) * 0x1.0p-53;
    if (options_.recall_fraction > 0 && u < options_.recall_fraction) {
      const double depth = static_cast<double>(recall::ProbeSeed(draw, 1) >> 11) * 0x1.0p-53;
      auto probe = recall::MakeProbe(task, depth, draw, tokenize);
      if (probe.ok()) {
        rows.push_back(torch::tensor(probe->tokens, torch::kLong));
        continue;
      }
      throw std::runtime_error(absl::StrCat("recall probe: ", probe.status().message()));
    }
    rows.push_back(CorpusRow(sequences[i]));
  }
  return rows;
}

// Update `step`'s recall rows: position p of the data order (p = (step - 1) B + i) is the MQAR
// row of seed ProbeSeed(seed ^ "MQAR", p), so a resumed run draws what an uninterrupted one would.
Trainer::Batch Trainer::RecallBatch(int64_t step) const {
  Batch batch;
  const recall::MqarOptions mqar = Mqar();
  auto answers = torch::zeros({options_.batch_size, options_.length}, torch::kFloat32);
  for (int64_t i = 0; i < options_.batch_size; ++i) {
    const auto position = static_cast<uint64_t>((step - 1) * options_.batch_size + i);
    const recall::MqarRow row = recall::MakeMqarRow(mqar, recall::ProbeSeed(options_.seed ^ 0x4D514152ULL, position));
    batch.rows.push_back(torch::tensor(row.tokens, torch::kLong));
    for (const int64_t target : row.answer_targets) answers[i][target] = 1.0f;
  }
  batch.answers = answers.to(device_);
  return batch;
}

// The cross-entropy of every target of the rows (L + 1 ids each), [B, L] float32.
torch::Tensor Trainer::TokenLosses(const std::vector<torch::Tensor>& rows, torch::Tensor* logits_out) {
  const int64_t length = options_.length;
  auto batch = torch::stack(rows).to(device_);
  auto inputs = batch.narrow(1, 0, length), targets = batch.narrow(1, 1, length);
  auto hidden = model_->Forward(model_->Embed(inputs), models::ForwardOptions{}).hidden;
  auto logits = model_->Logits(hidden);
  const int64_t vocab = logits.size(-1);
  namespace F = torch::nn::functional;
  auto losses = F::cross_entropy(logits.reshape({-1, vocab}).to(torch::kFloat32), targets.reshape({-1}),
                                 F::CrossEntropyFuncOptions().reduction(torch::kNone));
  if (logits_out != nullptr) *logits_out = logits.detach();
  return losses.view({static_cast<int64_t>(rows.size()), length});
}

StepRecord Trainer::Step(int64_t step) {
  StepRecord record;
  record.step = step;
  record.lr = LearningRate(schedule_, step);
  for (auto& group : optimizer_->param_groups()) {
    static_cast<torch::optim::AdamWOptions&>(group.options()).lr(record.lr);
  }
  optimizer_->zero_grad();
  torch::Tensor loss, objective;
  if (options_.task == Task::kRecall) {
    Batch batch = RecallBatch(step);
    torch::Tensor logits;
    auto losses = TokenLosses(batch.rows, &logits);
    auto targets = torch::stack(batch.rows).to(device_).narrow(1, 1, options_.length);
    auto hits = (logits.argmax(-1) == targets).to(torch::kFloat32);
    const auto answer_count = batch.answers.sum();
    loss = (losses * batch.answers).sum() / answer_count;
    record.accuracy = ((hits * batch.answers).sum() / answer_count).item<double>();
    auto weight = batch.answers + options_.recall_rest_weight * (1 - batch.answers);
    if (weights_.defined()) weight = weight * weights_;
    objective = (losses * weight).sum() / weight.sum();
  } else {
    auto losses = TokenLosses(BatchRows(step));
    loss = losses.mean();
    objective = weights_.defined() ? (losses * weights_).mean() : loss;
  }
  objective.backward();
  const double max_norm = options_.clip > 0 ? options_.clip : std::numeric_limits<double>::infinity();
  record.grad_norm = torch::nn::utils::clip_grad_norm_(parameters_, max_norm);
  optimizer_->step();
  record.loss = loss.item<double>();
  record.objective = objective.item<double>();
  const int64_t before = result_.steps.empty() ? 0 : result_.steps.back().tokens;
  record.tokens = before + options_.batch_size * options_.length;
  return record;
}

// The mean cross-entropy over the first max_eval_sequences held-out sequences, unweighted, overall
// and by target position decile.
EvalRecord Trainer::Evaluate(int64_t step) {
  if (options_.task == Task::kRecall) return EvaluateRecall(step);
  torch::NoGradGuard no_grad;
  const auto& eval = data_.split.eval;
  const auto count = std::min<int64_t>(static_cast<int64_t>(eval.size()), options_.max_eval_sequences);
  const int64_t length = options_.length;
  auto by_position = torch::zeros({length}, torch::kFloat64);
  for (int64_t first = 0; first < count; first += options_.batch_size) {
    const int64_t last = std::min(count, first + options_.batch_size);
    std::vector<torch::Tensor> rows;
    for (int64_t k = first; k < last; ++k) rows.push_back(CorpusRow(eval[k]));
    by_position += TokenLosses(rows).to(torch::kCPU).to(torch::kFloat64).sum(0);
  }
  const auto sums = by_position.contiguous();
  const double* sum = sums.data_ptr<double>();
  EvalRecord record;
  record.step = step;
  std::vector<double> decile_sum(10, 0.0);
  std::vector<int64_t> decile_count(10, 0);
  for (int64_t t = 1; t <= length; ++t) {
    const int64_t d = 10 * (t - 1) / length;
    decile_sum[d] += sum[t - 1];
    decile_count[d] += count;
    record.loss += sum[t - 1];
  }
  record.loss /= static_cast<double>(count * length);
  for (int d = 0; d < 10; ++d) {
    if (decile_count[d] > 0) record.by_decile.push_back(decile_sum[d] / static_cast<double>(decile_count[d]));
  }
  return record;
}

// probes_per_depth held-out probes at each depth 0, 0.1, .., 1: probe k at depth index d is of seed
// ProbeSeed(seed ^ "HELDOUT", 1000003 d + k), a stream the training rows never use.
EvalRecord Trainer::EvaluateRecall(int64_t step) {
  torch::NoGradGuard no_grad;
  const recall::MqarOptions mqar = Mqar();
  EvalRecord record;
  record.step = step;
  double log_prob_sum = 0, hit_sum = 0;
  int64_t probes = 0;
  for (int d = 0; d <= 10; ++d) {
    DepthRecall at{d / 10.0, options_.probes_per_depth, 0, 0};
    for (int64_t first = 0; first < options_.probes_per_depth; first += options_.batch_size) {
      const int64_t last = std::min(options_.probes_per_depth, first + options_.batch_size);
      std::vector<torch::Tensor> rows;
      std::vector<int64_t> answers;
      for (int64_t k = first; k < last; ++k) {
        const uint64_t seed = recall::ProbeSeed(options_.seed ^ 0x48454C444F5554ULL, static_cast<uint64_t>(1000003 * d + k));
        const recall::MqarRow probe = recall::MakeMqarProbe(mqar, at.depth, seed);
        rows.push_back(torch::tensor(probe.tokens, torch::kLong));
        answers.push_back(probe.tokens.back());
      }
      torch::Tensor logits;
      TokenLosses(rows, &logits);
      auto last_logits = logits.select(1, options_.length - 1).to(torch::kCPU).to(torch::kFloat64);
      auto log_probs = torch::log_softmax(last_logits, -1);
      auto predicted = last_logits.argmax(-1);
      for (size_t i = 0; i < answers.size(); ++i) {
        const auto row = static_cast<int64_t>(i);
        at.log_prob += log_probs[row][answers[i]].item<double>();
        at.accuracy += predicted[row].item<int64_t>() == answers[i] ? 1.0 : 0.0;
      }
    }
    log_prob_sum += at.log_prob;
    hit_sum += at.accuracy;
    probes += at.probes;
    at.log_prob /= static_cast<double>(at.probes);
    at.accuracy /= static_cast<double>(at.probes);
    record.recall.push_back(at);
  }
  record.loss = -log_prob_sum / static_cast<double>(probes);
  record.accuracy = hit_sum / static_cast<double>(probes);
  return record;
}

TrainerState Trainer::StateAfter(int64_t step) const {
  TrainerState state;
  const int64_t position = step * options_.batch_size;
  const auto count = std::max<int64_t>(1, static_cast<int64_t>(data_.split.train.size()));
  state.step = step;
  state.epoch = position / count;
  state.epoch_position = position % count;
  state.tokens = position * options_.length;
  state.seed = options_.seed;
  state.length = options_.length;
  state.batch_size = options_.batch_size;
  state.steps = options_.steps;
  state.config_json = models::ConfigToHuggingFaceJson(result_.config);
  return state;
}

bool Trainer::Saves(int64_t step) const {
  const auto& steps = options_.save_steps;
  return step == options_.steps || (options_.stop_after_step > 0 && step == options_.stop_after_step) ||
         std::find(steps.begin(), steps.end(), step) != steps.end();
}

absl::Status Trainer::Save(int64_t step) {
  std::string eval_note;
  if (options_.task == Task::kRecall) {
    result_.evals.push_back(Evaluate(step));
    eval_note = absl::StrCat(", held-out probes: accuracy ", result_.evals.back().accuracy, ", answer loss ",
                             result_.evals.back().loss);
  } else if (!data_.split.eval.empty()) {
    result_.evals.push_back(Evaluate(step));
    eval_note = absl::StrCat(", eval loss ", result_.evals.back().loss);
  }
  // loss.json first: a run killed between the two resumes from the previous checkpoint, and
  // ReadLossLog keeps only the records up to that one.
  auto status = WriteLossLog(options_.out_dir, result_, options_.batch_size, options_.length);
  if (!status.ok()) return status;
  status = WriteCheckpoint(options_.out_dir, StateAfter(step), *model_, *optimizer_, data_.tokenizer_files);
  if (!status.ok()) return status;
  Note(absl::StrCat("saved ", options_.out_dir, "/step", step, eval_note));
  return absl::OkStatus();
}

absl::Status Trainer::Run() {
  const int64_t first = result_.first_step;
  const int64_t last = options_.stop_after_step > 0 ? options_.stop_after_step : options_.steps;
  if (first == 0 && Saves(0)) {
    if (auto status = Save(0); !status.ok()) return status;
  }
  const bool show = options_.progress == TrainOptions::Progress::kOn ||
                    (options_.progress == TrainOptions::Progress::kAuto && StderrIsTerminal());
  ProgressBar bar(std::cerr, first, last);
  for (int64_t step = first + 1; step <= last; ++step) {
    result_.steps.push_back(Step(step));
    result_.last_step = step;
    if (show) bar.Update(step, result_.steps.back().loss, options_.batch_size * options_.length);
    if (Saves(step)) {
      if (show) bar.Finish();
      if (auto status = Save(step); !status.ok()) return status;
    }
  }
  if (show) bar.Finish();
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TrainResult> Train(const TrainOptions& options) {
  if (auto status = ValidateOptions(options); !status.ok()) return status;
  const torch::Device device = *ParseDevice(options.device);  // Checked by ValidateOptions.
  const torch::Dtype dtype = *ParseDtype(options.dtype);
  auto data = PrepareTrainingData(options);
  if (!data.ok()) return data.status();
  auto config = ResolveModelConfig(options, *data);
  if (!config.ok()) return config.status();
  if (options.task == Task::kRecall) {
    recall::MqarOptions mqar = options.mqar;
    mqar.length = options.length;
    if (auto status = recall::CheckMqarOptions(mqar, config->vocab_size); !status.ok()) return status;
  }
  data->tokenizer_files.push_back({std::string(kTaskFileName), TaskJson(options)});
  if (auto status = WriteTokenizerCopy(options, *data); !status.ok()) return status;
  if (options.threads > 0) torch::set_num_threads(options.threads);
  std::string note =
      options.task == Task::kRecall
          ? absl::StrCat("posbias-train: task recall: ", options.mqar.pairs, " pairs per row of ", options.length,
                         " + 1 tokens, placement ", recall::PlacementName(options.mqar.placement), "; ",
                         options.probes_per_depth, " held-out probes at each of 11 depths per save\n")
          : absl::StrCat("posbias-train: ", data->stream.documents, " documents, ", data->stream.tokens.size(),
                         " tokens; ", data->split.train.size(), " training and ", data->split.eval.size(),
                         " held-out sequences of ", options.length, " + 1 tokens; unigram entropy ",
                         data->unigram_entropy_nats, " nats/token\n");
  Trainer trainer(options, *std::move(data), device, dtype);
  try {
    if (auto status = trainer.Setup(*config); !status.ok()) return status;
    if (options.log != nullptr) *options.log << note << std::flush;
    if (options.resume) {
      if (auto status = trainer.Resume(); !status.ok()) return status;
    }
    if (auto status = trainer.Run(); !status.ok()) return status;
  } catch (const c10::Error& error) {
    return absl::InternalError(absl::StrCat("training failed: ", error.what_without_backtrace()));
  } catch (const std::runtime_error& error) {  // A recall probe the tokenizer could not make.
    return absl::InternalError(absl::StrCat("training failed: ", error.what()));
  }
  return trainer.TakeResult();
}

}  // namespace posbias::train
