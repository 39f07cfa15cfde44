// Associative recall, the behaviour behind "lost in the middle": a context of key=value pairs
// among filler words, ending with a query key and "="; the answer is that key's value. Generated
// by a seeded generator the project owns (the same bytes on every platform: its own splitmix64
// stream, no std:: distributions), for posbias-train's data (a chosen fraction of its sequences)
// and for recall jobs (accuracy by the depth of the queried pair).
//
// A probe of length L, with q = the query's tokens (key, "=") and b = a pair block's tokens
// (" ", key, "=", value, " "):
//   positions 1..L-q   the haystack: `pairs` blocks (the queried one and pairs - 1 distractors,
//                      all keys distinct) with filler words between them;
//   positions L-q+1..L the query: the queried key, then "=";
//   token L + 1        the answer: the queried pair's value (one token).
// The queried block starts at offset round(depth * (L - q - b)) of the haystack (depth 0: at the
// start, 1: ending where the haystack ends); the distractors are spread over the rest at random.
// Each piece (filler text, a key, "=", a value, " ") is tokenized on its own and the ids are
// joined: for a byte-level tokenizer that is the whole text's tokenization, for BPE the pieces'.
// Filler words are lowercase letters without "=", so "key=" occurs only in pairs and the query.
//
// Torch-free and gRPC-free.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::recall {

struct TaskOptions {
  int64_t length = 128;     // L: the probe's context tokens, the query's "=" at position L.
  int64_t pairs = 8;        // key=value pairs in the context, the queried one included; 1..256.
  int64_t key_letters = 3;  // Letters a-z per key; 1..16 (26^letters must exceed pairs).
  // The values' alphabet: each value is one of these characters, drawn uniformly (chance accuracy
  // is 1 / its size); printable ASCII other than "=" and " ", distinct, 1..64 of them.
  std::string values = "abcdefghijklmnopqrstuvwxyz";
};

// The model's tokenizer applied to one piece of text.
using Tokenize = std::function<absl::StatusOr<std::vector<int64_t>>(std::string_view text)>;

struct Probe {
  std::vector<int64_t> tokens;  // L + 1 ids: positions 1..L, then the answer.
  int64_t pair_start = 0;       // 1-based position of the queried pair's first key token.
  int64_t pair_tokens = 0;      // Its key, "=" and value tokens.
  std::string key;              // The queried key and its value (the answer's text).
  char value = 0;
};

// INVALID_ARGUMENT naming the option and what is allowed.
absl::Status CheckTaskOptions(const TaskOptions& options);

// One probe with the queried pair at `depth` in [0, 1], drawn from `seed`. INVALID_ARGUMENT when
// the options are out of range, when a value is not one token of the tokenizer, or when the
// context cannot hold the query, the queried block and room for `pairs` more blocks (what every
// depth needs; the message says how many tokens that is).
absl::StatusOr<Probe> MakeProbe(const TaskOptions& options, double depth, uint64_t seed, const Tokenize& tokenize);

// The seed of probe `index` of a sweep seeded by `seed` (probes of one sweep are independent).
uint64_t ProbeSeed(uint64_t seed, uint64_t index);

}  // namespace posbias::recall
