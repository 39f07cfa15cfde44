// Reading, tokenizing and splitting the training corpus (corpus.h).
#include "server/train/corpus.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"

namespace posbias::train {
namespace {

namespace fs = std::filesystem;

absl::Status AppendDocument(const std::string& text, const tokenizer::Tokenizer& tokenizer, int64_t eos_id,
                            TokenStream& stream) {
  if (text.empty()) return absl::OkStatus();
  tokenizer::EncodeOptions options;
  options.special_tokens_as_text = true;
  auto encoding = tokenizer.Encode(text, options);
  if (!encoding.ok()) return encoding.status();
  stream.tokens.insert(stream.tokens.end(), encoding->ids.begin(), encoding->ids.end());
  stream.tokens.push_back(eos_id);
  ++stream.documents;
  return absl::OkStatus();
}

absl::Status AppendJsonLines(const std::string& path, std::ifstream& in, const tokenizer::Tokenizer& tokenizer,
                             int64_t eos_id, TokenStream& stream) {
  std::string line;
  for (int64_t number = 1; std::getline(in, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const auto json = nlohmann::json::parse(line, nullptr, false);
    if (json.is_discarded() || !json.is_object() || !json.contains("text") || !json["text"].is_string()) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "--data", absl::StrCat(path, ":", number),
                                   "a JSON object with a string \"text\" field on every line of a .jsonl file"});
    }
    if (auto status = AppendDocument(json["text"].get<std::string>(), tokenizer, eos_id, stream); !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ListDocumentFiles(const std::vector<std::string>& paths) {
  std::vector<std::string> files;
  for (const auto& path : paths) {
    std::error_code error;
    if (fs::is_directory(path, error)) {
      std::vector<std::string> inside;
      for (const auto& entry : fs::directory_iterator(path, error)) {
        if (entry.is_regular_file()) inside.push_back(entry.path().string());
      }
      std::sort(inside.begin(), inside.end());
      files.insert(files.end(), inside.begin(), inside.end());
    } else if (fs::is_regular_file(path, error)) {
      files.push_back(path);
    } else {
      return absl::NotFoundError(absl::StrCat("--data ", path, ": no such file or directory"));
    }
  }
  if (files.empty()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "--data", paths.empty() ? "none" : paths.front(),
                                 "one or more text or .jsonl files (or directories holding some)"});
  }
  return files;
}

absl::StatusOr<TokenStream> TokenizeFiles(const std::vector<std::string>& files,
                                          const tokenizer::Tokenizer& tokenizer, int64_t eos_id) {
  TokenStream stream;
  for (const auto& path : files) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return absl::NotFoundError("--data: cannot read " + path);
    absl::Status status;
    if (fs::path(path).extension() == ".jsonl") {
      status = AppendJsonLines(path, in, tokenizer, eos_id, stream);
    } else {
      status = AppendDocument(std::string(std::istreambuf_iterator<char>(in), {}), tokenizer, eos_id, stream);
    }
    if (!status.ok()) return status;
    ++stream.files;
  }
  return stream;
}

std::vector<int64_t> SeededPermutation(int64_t count, uint64_t seed, uint64_t stream) {
  std::vector<int64_t> order(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i) order[i] = i;
  std::mt19937_64 engine(seed * 0x9E3779B97F4A7C15ULL + stream);
  for (int64_t i = count - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(engine() % static_cast<uint64_t>(i + 1));
    std::swap(order[i], order[j]);
  }
  return order;
}

SequenceSplit SplitSequences(int64_t stream_size, int64_t length, double eval_fraction, uint64_t seed) {
  const int64_t count = stream_size > length ? (stream_size - 1) / length : 0;
  int64_t held_out = static_cast<int64_t>(std::llround(eval_fraction * static_cast<double>(count)));
  if (eval_fraction > 0 && count >= 2) held_out = std::max<int64_t>(held_out, 1);
  held_out = std::min(held_out, count);
  const auto order = SeededPermutation(count, seed, /*stream=*/0);
  SequenceSplit split;
  split.eval.assign(order.begin(), order.begin() + held_out);
  split.train.assign(order.begin() + held_out, order.end());
  std::sort(split.eval.begin(), split.eval.end());
  std::sort(split.train.begin(), split.train.end());
  return split;
}

double UnigramEntropyNats(const std::vector<int64_t>& tokens, const std::vector<int64_t>& sequences, int64_t length) {
  std::unordered_map<int64_t, int64_t> counts;
  int64_t total = 0;
  for (const int64_t k : sequences) {
    for (int64_t i = k * length + 1; i <= k * length + length; ++i) ++counts[tokens[i]], ++total;
  }
  double entropy = 0;
  for (const auto& [token, count] : counts) {
    const double p = static_cast<double>(count) / static_cast<double>(total);
    entropy -= p * std::log(p);
  }
  return entropy;
}

}  // namespace posbias::train
