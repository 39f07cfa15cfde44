// The trainer's files in its output directory (trainer.h): step<N>/ checkpoints, the state a
// resumed run continues from, and loss.json.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/optim/optimizer.h>

#include "absl/status/statusor.h"
#include "server/models/model.h"
#include "server/train/trainer.h"

namespace posbias::train {

// Where the data order stands after `step` updates and what must match to resume.
struct TrainerState {
  int64_t step = 0;
  int64_t epoch = 0;           // Epoch of the next sequence to train on (0-based).
  int64_t epoch_position = 0;  // Its position in that epoch's order.
  int64_t tokens = 0;          // Target tokens trained on so far.
  uint64_t seed = 0;
  int64_t length = 0, batch_size = 0, steps = 0;
  std::string config_json;     // models::ConfigToHuggingFaceJson of the trained model.
};

// A file of the tokenizer, copied into each checkpoint: its name and contents.
using NamedFile = std::pair<std::string, std::string>;

// The tokenizer files of `dir` (tokenizer.json, vocab.json, merges.txt, tokenizer_config.json,
// special_tokens_map.json, those present). NOT_FOUND naming --tokenizer when neither
// tokenizer.json nor vocab.json + merges.txt is there.
absl::StatusOr<std::vector<NamedFile>> ReadTokenizerFiles(const std::string& dir);

// Writes <out_dir>/step<N>/ (N = state.step) whole: config.json, model.safetensors (float32),
// the tokenizer files, trainer_state.pt (parameters in their dtype, in NamedParameters order,
// and the optimizer) and trainer_state.json. An existing step<N> is replaced.
absl::Status WriteCheckpoint(const std::string& out_dir, const TrainerState& state, models::DecoderModel& model,
                             torch::optim::Optimizer& optimizer, const std::vector<NamedFile>& tokenizer_files);

// The step<N> directory with the largest N holding a trainer_state.json; NOT_FOUND naming
// --resume when there is none.
absl::StatusOr<std::string> LatestCheckpoint(const std::string& out_dir);
absl::StatusOr<TrainerState> ReadTrainerState(const std::string& step_dir);
// Loads trainer_state.pt into the model's parameters and the optimizer.
absl::Status LoadTrainingState(const std::string& step_dir, models::DecoderModel& model,
                               torch::optim::Optimizer& optimizer);

// loss.json (trainer.h), written atomically (a temporary file renamed).
absl::Status WriteLossLog(const std::string& out_dir, const TrainResult& result, int64_t batch_size, int64_t length);
// The update and eval records of an earlier run's loss.json up to step `last_step`.
absl::Status ReadLossLog(const std::string& out_dir, int64_t last_step, TrainResult& result);

}  // namespace posbias::train
