// The training corpus: documents read from files, tokenized, joined by the end-of-sequence token,
// and cut into sequences of L + 1 tokens (L inputs, each followed by its next-token target).
//
// Documents: a text file is one document; a `.jsonl` file holds one JSON object per line whose
// "text" field is one document (blank lines skipped); a directory means each of its regular files,
// in name order, read as above (not recursively). Every document is followed by the EOS token, so
// the model learns where documents end. Sequence k is tokens [k L, k L + L] of that stream: its
// last token is the first of sequence k + 1, so every token after the first is a target once.
// Torch-free.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/tokenizer/tokenizer.h"

namespace posbias::train {

struct TokenStream {
  std::vector<int64_t> tokens;  // The joined documents, each followed by EOS.
  int64_t documents = 0;
  int64_t files = 0;
};

// The document files behind --data paths, in order (directories expanded, sorted by name).
// NOT_FOUND naming the path when one does not exist; INVALID_ARGUMENT when there is none.
absl::StatusOr<std::vector<std::string>> ListDocumentFiles(const std::vector<std::string>& paths);

// Reads and tokenizes every document (special tokens in the text are plain text), EOS after each.
// A .jsonl line that is not an object with a string "text" is INVALID_ARGUMENT naming file:line.
absl::StatusOr<TokenStream> TokenizeFiles(const std::vector<std::string>& files,
                                          const tokenizer::Tokenizer& tokenizer, int64_t eos_id);

// Sequence indices split into training and held-out ones: a seeded permutation of the
// (size - 1) / length sequences, its first round(eval_fraction * count) (at least 1 when the
// fraction is positive and there are two or more sequences) held out; both lists sorted.
struct SequenceSplit {
  std::vector<int64_t> train;
  std::vector<int64_t> eval;
};
SequenceSplit SplitSequences(int64_t stream_size, int64_t length, double eval_fraction, uint64_t seed);

// A seeded Fisher-Yates shuffle of 0..count-1 (std::mt19937_64, whose outputs the standard fixes,
// so the order is the same on every platform). `stream` separates uses of one seed.
std::vector<int64_t> SeededPermutation(int64_t count, uint64_t seed, uint64_t stream);

// The entropy of the targets' unigram distribution, in nats per token: the loss of the best
// model that ignores context, over the target tokens of `sequences`.
double UnigramEntropyNats(const std::vector<int64_t>& tokens, const std::vector<int64_t>& sequences, int64_t length);

}  // namespace posbias::train
