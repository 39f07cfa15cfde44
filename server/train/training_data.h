// What a run trains on (trainer.h): the tokenizer, the token stream of the corpus, its split into
// training and held-out sequences, and the model's vocabulary checked against the tokenizer.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "server/models/config.h"
#include "server/tokenizer/tokenizer.h"
#include "server/train/checkpoint.h"
#include "server/train/corpus.h"
#include "server/train/trainer.h"

namespace posbias::train {

struct TrainingData {
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
  std::vector<NamedFile> tokenizer_files;  // Copied into every checkpoint.
  bool byte_level = false;                 // The trainer's own byte-level tokenizer.
  int64_t eos_id = 0;
  TokenStream stream;
  SequenceSplit split;
  double unigram_entropy_nats = 0;         // Of the training sequences' targets.
};

// In this order, each failure naming its flag: --out already holding a run without --resume; no
// data files; the tokenizer missing or invalid (nothing is written here); an
// --eos-token that is not one token; then the corpus, and fewer training sequences than
// --batch-size (the message says how many there are and how many are needed).
absl::StatusOr<TrainingData> PrepareTrainingData(const TrainOptions& options);

// The options' model with its vocabulary resolved (the byte-level tokenizer's 257 unless --vocab
// was given); INVALID_ARGUMENT naming --vocab when it is smaller than the tokenizer's.
absl::StatusOr<models::ModelConfig> ResolveModelConfig(const TrainOptions& options, const TrainingData& data);

// The byte-level tokenizer's files into <out>/tokenizer/ (nothing for --tokenizer's).
absl::Status WriteTokenizerCopy(const TrainOptions& options, const TrainingData& data);

}  // namespace posbias::train
