// Preparing a run's data (training_data.h).
#include "server/train/training_data.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"
#include "server/train/byte_tokenizer.h"

namespace posbias::train {
namespace {

namespace fs = std::filesystem;

absl::Status FlagError(const std::string& flag, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, flag, value, allowed});
}

absl::Status CheckOutputDirectory(const TrainOptions& options) {
  std::error_code error;
  if (!options.resume && fs::exists(fs::path(options.out_dir) / "loss.json", error)) {
    return FlagError("--out", options.out_dir,
                     "a directory without an earlier run's loss.json (pass --resume to continue that run)");
  }
  if (options.resume && !fs::is_directory(options.out_dir, error)) {
    return absl::NotFoundError(absl::StrCat("--resume: --out ", options.out_dir, " is not a directory"));
  }
  return absl::OkStatus();
}

// The tokenizer and its files: --tokenizer's, or the byte-level one (written to <out>/tokenizer/ by
// WriteTokenizerCopy once everything is checked).
absl::Status LoadTokenizer(const TrainOptions& options, TrainingData& data) {
  if (options.tokenizer_dir.empty()) {
    data.byte_level = true;
    data.tokenizer_files = {{"tokenizer.json", ByteLevelTokenizerJson()},
                            {"tokenizer_config.json", ByteLevelTokenizerConfigJson()}};
    auto tokenizer = tokenizer::Tokenizer::FromTokenizerJson(data.tokenizer_files.front().second);
    if (!tokenizer.ok()) return tokenizer.status();
    data.tokenizer = *std::move(tokenizer);
    return absl::OkStatus();
  }
  const std::string& dir = options.tokenizer_dir;
  auto files = ReadTokenizerFiles(dir);
  if (!files.ok()) return files.status();
  data.tokenizer_files = *std::move(files);
  auto tokenizer = tokenizer::Tokenizer::FromDirectory(dir);
  if (!tokenizer.ok()) {
    return absl::Status(tokenizer.status().code(), absl::StrCat("--tokenizer ", dir, ": ", tokenizer.status().message()));
  }
  data.tokenizer = *std::move(tokenizer);
  return absl::OkStatus();
}

// --eos-token's id (it must encode to exactly one token), else the tokenizer's EOS.
absl::StatusOr<int64_t> ResolveEos(const TrainOptions& options, const tokenizer::Tokenizer& tokenizer) {
  if (options.eos_token.empty()) {
    if (auto eos = tokenizer.eos_token_id()) return *eos;
    return FlagError("--eos-token", "none", "the text of a token (the tokenizer names no end-of-sequence token)");
  }
  auto encoding = tokenizer.Encode(options.eos_token);
  if (!encoding.ok()) return encoding.status();
  if (encoding->ids.size() != 1) {
    return FlagError("--eos-token", options.eos_token,
                     absl::StrCat("the text of one token (it encodes to ", encoding->ids.size(), " tokens)"));
  }
  return encoding->ids.front();
}

}  // namespace

absl::StatusOr<TrainingData> PrepareTrainingData(const TrainOptions& options) {
  if (auto status = CheckOutputDirectory(options); !status.ok()) return status;
  TrainingData data;
  if (options.task == Task::kRecall) {  // No corpus: the rows are drawn from the seed.
    if (auto status = LoadTokenizer(options, data); !status.ok()) return status;
    if (auto eos = data.tokenizer->eos_token_id()) data.eos_id = *eos;
    return data;
  }
  auto files = ListDocumentFiles(options.data_paths);
  if (!files.ok()) return files.status();
  if (auto status = LoadTokenizer(options, data); !status.ok()) return status;
  auto eos = ResolveEos(options, *data.tokenizer);
  if (!eos.ok()) return eos.status();
  data.eos_id = *eos;
  auto stream = TokenizeFiles(*files, *data.tokenizer, data.eos_id);
  if (!stream.ok()) return stream.status();
  data.stream = *std::move(stream);
  const auto size = static_cast<int64_t>(data.stream.tokens.size());
  data.split = SplitSequences(size, options.length, options.eval_fraction, options.seed);
  const auto train = static_cast<int64_t>(data.split.train.size());
  if (train < options.batch_size) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--data: the corpus (", data.stream.documents, " documents, ", size, " tokens) gives ", train,
        " training sequences of --length + 1 = ", options.length + 1, " tokens (", data.split.eval.size(),
        " more held out); one batch of --batch-size ", options.batch_size, " needs ", options.batch_size,
        ": add data or lower --batch-size, --length or --eval-fraction"));
  }
  data.unigram_entropy_nats = UnigramEntropyNats(data.stream.tokens, data.split.train, options.length);
  return data;
}

absl::StatusOr<models::ModelConfig> ResolveModelConfig(const TrainOptions& options, const TrainingData& data) {
  models::ModelConfig config = options.model;
  if (data.byte_level && !options.vocab_given) config.vocab_size = kByteLevelVocabSize;
  const int64_t needed = std::max(data.tokenizer->vocab_size(), data.eos_id + 1);
  if (config.vocab_size < needed) {
    return FlagError("--vocab", absl::StrCat(config.vocab_size),
                     absl::StrCat(">= ", needed, " (the tokenizer's size; pass --vocab ", needed, " or more)"));
  }
  return config;
}

absl::Status WriteTokenizerCopy(const TrainOptions& options, const TrainingData& data) {
  if (!data.byte_level) return absl::OkStatus();
  return WriteByteLevelTokenizer((fs::path(options.out_dir) / "tokenizer").string());
}

}  // namespace posbias::train
