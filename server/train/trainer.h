// posbias::train: next-token training of any family of the model zoo from its seeded
// initialization, so that trained checkpoints exist beside the initial ones.
//
// One run: the options are checked (every error names its flag and what is allowed) before any
// work; the tokenizer is loaded (or the byte-level one of byte_tokenizer.h made, and written to
// <out>/tokenizer/ once everything is checked); the corpus is read, tokenized and cut into sequences
// (corpus.h), a seeded share held out for the eval loss; the model is built at its seeded
// initialization (models::BuildModel) and trained with AdamW (decoupled weight decay on matrices
// and embeddings only, not on norms and biases), linear warm-up then cosine decay
// (lr_schedule.h), and gradient clipping by global norm. The loss is the mean next-token
// cross-entropy, optionally weighted per position (position_weights.h).
//
// Data order: update s (1-based) takes the B training sequences at positions (s - 1) B .. s B - 1
// of the concatenation of per-epoch orders, epoch e's order a seeded permutation of the training
// sequences (corpus.h: SeededPermutation); with --recall-fraction, the positions drawn for recall
// take a probe generated from the seed and the position instead; with --task recall (no corpus),
// position p is the recall row of seed ProbeSeed(seed ^ "MQAR", p) (recall/mqar.h). The order is
// thus a function of the seed and the step, and a run resumed from a checkpoint takes exactly the
// batches an uninterrupted one would. On the CPU a run is deterministic for a seed.
//
// Output, in <out>/: step<N>/ for each saved step N (the seeded initialization as step0): a Hugging
// Face directory (config.json, model.safetensors in float32, the tokenizer's files) plus
// trainer_state.pt (the parameters in the training dtype and the AdamW state) and
// trainer_state.json (step, epoch and position of the data order, seed, shape) and
// posbias_task.json (the task, kTaskFileName); loss.json (every update's loss, lr, gradient norm
// and tokens seen, the eval loss at each saved step, with --task recall the answers' accuracy and
// the held-out probes by depth, and the unigram entropy of the training targets for reference),
// rewritten at each save. A step directory appears whole (written as step<N>.partial, then
// renamed).
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/models/config.h"
#include "server/models/model.h"
#include "server/recall/mqar.h"
#include "server/recall/recall_task.h"
#include "server/train/position_weights.h"

namespace posbias::train {

// What the model learns from.
struct TrainOptions;

enum class Task {
  kText,    // Next-token prediction on a corpus (--data), optionally mixed with recall probes.
  kRecall,  // Multi-query associative recall on token ids (recall/mqar.h): no corpus; the loss on
            // the answers (the other targets weighted by recall_rest_weight); held-out probes by
            // depth at each save.
};

std::string TaskName(Task task);
// "text" or "recall"; INVALID_ARGUMENT naming --task otherwise.
absl::StatusOr<Task> ParseTask(const std::string& name);

// Every checkpoint of a run holds kTaskFileName: TaskJson's record of what it was trained on
// ({"task": "text"}, or "recall" with the length, pairs, id ranges [first, last), placement and
// rest weight), so that a recall job on it can ask the task it learned.
inline constexpr std::string_view kTaskFileName = "posbias_task.json";
std::string TaskJson(const TrainOptions& options);

// --task recall's recipe: posbias-train's defaults for that task. docs/user-guide/recall.md says
// what it reached; it does not yet meet the goal of >= 0.9 probe accuracy for 2-layer models of
// width 64 at L = 128, K = 8.
struct RecallRecipe {
  static constexpr int64_t kSteps = 3000;
  static constexpr int64_t kBatchSize = 64;
  static constexpr double kLr = 3e-3;
  static constexpr int64_t kWarmupSteps = 150;
  static constexpr double kWeightDecay = 0.1;
};

struct TrainOptions {
  Task task = Task::kText;
  // ---- the model
  models::ModelConfig model;  // Family and shape (presets and overrides resolved by the caller).
  // Whether model.vocab_size was asked for; if not and no tokenizer is given, the byte-level
  // tokenizer's 257 is used.
  bool vocab_given = false;
  uint64_t seed = 0;          // Initialization, held-out split and data order.

  // ---- the data
  std::vector<std::string> data_paths;  // Files or directories (corpus.h).
  std::string tokenizer_dir;            // tokenizer.json or vocab.json + merges.txt; "" = byte-level.
  std::string eos_token;                // The separator's text; "" = the tokenizer's EOS token.
  int64_t length = 128;                 // L: input tokens per training sequence (>= 2).
  double eval_fraction = 0.05;          // Share of sequences held out, in [0, 0.5].
  int64_t max_eval_sequences = 256;     // At most this many held-out sequences are evaluated.
  // Associative recall mixed into the data (recall/recall_task.h): each training sequence is,
  // with probability recall_fraction (a seeded draw per position of the data order), a recall
  // probe of L + 1 tokens with its queried pair at a uniform depth, in place of the corpus's
  // sequence. The held-out loss stays on the corpus. recall.length is set to `length`.
  double recall_fraction = 0.0;          // [0, 1].
  recall::TaskOptions recall;
  // --task recall: the rows (mqar.length is set to `length`), the loss weight of the targets that
  // are not answers relative to the answers' 1 (in [0, 1]), and the held-out probes evaluated at
  // each save: probes_per_depth probes at each of the depths 0, 0.1, .., 1 (the queried pair's
  // depth, recall/mqar.h), from a stream of the seed that training never draws from.
  recall::MqarOptions mqar;
  double recall_rest_weight = 0.0;
  int64_t probes_per_depth = 64;

  // ---- the optimization
  int64_t steps = 1000;           // Updates.
  int64_t batch_size = 8;         // Sequences per update.
  double lr = 1e-3;               // Peak learning rate.
  double min_lr_ratio = 0.1;      // Final learning rate / peak, in [0, 1].
  int64_t warmup_steps = 0;       // Linear warm-up updates, in [0, steps].
  double weight_decay = 0.1;      // AdamW's decoupled weight decay (matrices and embeddings).
  double beta1 = 0.9, beta2 = 0.95;  // AdamW's moment decays, each in [0, 1).
  double clip = 1.0;              // Maximum global gradient norm; 0 = no clipping.
  PositionWeightOptions position_weights;

  // ---- the output
  std::string out_dir;                // Required.
  std::vector<int64_t> save_steps;    // Steps to save, each in [0, steps]; `steps` is always saved.
  bool resume = false;                // Continue from the latest <out>/step<N>.
  int64_t stop_after_step = 0;        // > 0: stop (and save) after this update, as if interrupted.
  std::string device = "cpu";         // "cpu" or "cuda:N" ("cuda" = cuda:0).
  std::string dtype = "float32";      // float32, float64, bfloat16 or float16.
  int threads = 0;                    // Intra-op CPU threads; 0 = torch's default.
  enum class Progress { kAuto, kOn, kOff } progress = Progress::kAuto;  // kAuto: when stderr is a terminal.
  std::ostream* log = nullptr;        // One-line notes (the corpus, the model, saves); null = none.
};

struct StepRecord {
  int64_t step = 0;
  double loss = 0;        // Mean next-token cross-entropy of the batch, nats/token (unweighted).
  double objective = 0;   // The loss that was minimized (position-weighted; = loss without weights).
  double lr = 0;
  double grad_norm = 0;   // Global gradient norm before clipping.
  int64_t tokens = 0;     // Target tokens seen up to and including this update.
  // --task recall: `loss` is the mean cross-entropy of the batch's answers, and this the share of
  // answers whose most likely token is the value; -1 for the text task.
  double accuracy = -1;
};

// Held-out recall probes at one depth (--task recall).
struct DepthRecall {
  double depth = 0;
  int64_t probes = 0;
  double accuracy = 0;  // Share of probes whose most likely next token is the answer.
  double log_prob = 0;  // Mean log p(answer), nats.
};

struct EvalRecord {
  int64_t step = 0;
  double loss = 0;  // Mean cross-entropy over the evaluated held-out sequences, nats/token.
  // The same by the target's position decile: entry d averages the targets at positions t
  // (1..L, predicting token t + 1) with floor(10 (t - 1) / L) = d (what a loss weighting costs
  // where). Their mean weighted by the deciles' position counts is `loss`.
  std::vector<double> by_decile;
  // --task recall: `loss` is the mean -log p(answer) over every probe, by_decile is empty, and
  // these are the probes by depth; `accuracy` their mean.
  std::vector<DepthRecall> recall;
  double accuracy = -1;
};

struct TrainResult {
  std::vector<StepRecord> steps;  // Every update, also those before a resume.
  std::vector<EvalRecord> evals;  // At each saved step (empty when nothing is held out).
  double unigram_entropy_nats = 0;
  int64_t train_sequences = 0, eval_sequences = 0, documents = 0, corpus_tokens = 0;
  int64_t first_step = 0;  // The step the run started from (0, or the resumed checkpoint's).
  int64_t last_step = 0;
  std::vector<double> position_weights;  // The L loss weights used.
  models::ModelConfig config;            // As trained (vocabulary resolved).
  std::shared_ptr<models::DecoderModel> model;  // The trained model.
};

// INVALID_ARGUMENT naming the flag and the allowed values; no file is touched.
absl::Status ValidateOptions(const TrainOptions& options);

absl::StatusOr<TrainResult> Train(const TrainOptions& options);

}  // namespace posbias::train
