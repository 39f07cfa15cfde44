// Multi-query associative recall on token ids (MQAR, after Zoology: Arora et al. 2023), the recall
// task small attention models learn: `pairs` key-value pairs scattered over a haystack of filler,
// then a query section that asks every key once, each followed by its value. Keys, values and
// filler are each their own set of token ids, so the task needs no text and no corpus: with the
// byte-level tokenizer the defaults put keys and values on the bytes 128..255 that ASCII text
// never holds and the filler on printable ASCII; with a trained tokenizer they are ids of its
// vocabulary like any other.
//
// A row of length L holds L + 1 ids at positions 1..L+1, with K = pairs and H = L + 1 - 2K:
//   positions 1..H       the haystack: the K pairs (key at p, value at p + 1; no two overlap)
//                        among filler ids;
//   positions H+1..L+1   the query section: key, value for each of the K pairs in a random order;
//                        the values there are the answers (targets at 0-based target indices
//                        H, H + 2, .., L - 1 of the L next-token targets).
// A probe is a row whose last query (the key at position L, its answer at L + 1) asks the pair
// placed at `depth`: its key at haystack position 1 + round(depth (H - 2)). The other pairs'
// starts are drawn one after another, uniformly among the starts still free.
//
// Torch-free and gRPC-free; the same ids for a seed on every platform (splitmix.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace posbias::recall {

// Token ids [first, last).
struct IdRange {
  int64_t first = 0, last = 0;
  int64_t size() const { return last - first; }
  bool Contains(int64_t id) const { return id >= first && id < last; }
  bool Overlaps(const IdRange& other) const { return first < other.last && other.first < last; }
};

// Where the training rows' pairs sit in the haystack.
enum class Placement {
  kUniform,    // Each pair's start uniform among the free starts.
  kNearQuery,  // Start s (0-based) weighted 1 / (H - 1 - s): a 1/d law in the distance d from the
               // pair's value to the query section, as MQAR's power-law spacing trains.
};

struct MqarOptions {
  int64_t length = 128;  // L: the row's input tokens.
  int64_t pairs = 8;     // K: key-value pairs, all asked; 1 <= K, and 3K <= H - 1.
  IdRange keys{128, 192};
  IdRange values{192, 256};
  IdRange filler{32, 127};
  Placement placement = Placement::kUniform;
};

struct MqarRow {
  std::vector<int64_t> tokens;          // L + 1 ids.
  std::vector<int64_t> answer_targets;  // 0-based target indices of the K answers, in query order.
  std::vector<int64_t> key_positions;   // 1-based haystack position of each asked pair's key, in query order.
};

std::string PlacementName(Placement placement);
// "uniform" or "near-query"; INVALID_ARGUMENT naming --recall-placement otherwise.
absl::Status ParsePlacement(const std::string& name, Placement& placement);

// INVALID_ARGUMENT naming the flag (--recall-pairs, --key-ids, --value-ids, --filler-ids)
// and what is allowed: non-empty ranges inside [0, vocab_size), pairwise disjoint, K distinct keys
// available, and a haystack with room for every pair (3K <= H - 1).
absl::Status CheckMqarOptions(const MqarOptions& options, int64_t vocab_size);

// A training row drawn from `seed` (options checked by the caller).
MqarRow MakeMqarRow(const MqarOptions& options, uint64_t seed);

// A probe: the last query asks the pair at `depth` in [0, 1] (its key_positions entry is the last).
MqarRow MakeMqarProbe(const MqarOptions& options, double depth, uint64_t seed);

// The depth of a haystack key position: (position - 1) / (H - 2).
double MqarDepth(const MqarOptions& options, int64_t key_position);

}  // namespace posbias::recall
