// Multi-query associative recall on token ids, the recall task small attention models learn
// (MQAR, after Zoology, HazyResearch 2023): `pairs` key-value pairs scattered among filler, then a
// section of queries, each a pair's key followed by its value. Keys, values and filler are each
// their own set of token ids, so the task needs no text and no corpus: with the byte-level
// tokenizer the defaults put keys and values on the bytes 128..255 that ASCII text never holds and
// the filler on printable ASCII; with a trained tokenizer they are ids of its vocabulary like any
// other.
//
// A row of length L holds L + 1 ids at positions 1..L+1. A training row asks m pairs, m drawn
// uniformly in 1..K (K = pairs): positions 1..H (H = L + 1 - 2m) are the haystack, the K pairs
// (key at p, value at p + 1; no two overlapping) among filler ids; positions H+1..L+1 are the
// query section, key and value of m distinct pairs in a random order, the last key at position L.
// The answers are the values of the section (0-based target index q - 1 predicts the value after
// the key at q). The pairs are placed one after another, each start drawn among the free starts
// of the haystack, uniformly or as `placement` weights its depth d = (p - 1) / (H - 2).
// Because m varies, the section begins anywhere from L + 2 - 2K to L: the model cannot tell a
// query from a pair by its position.
//
// A probe is the row with m = 1, as recall jobs ask: the K pairs in positions 1..L-1, the queried
// key at position L and its value, the answer, at L + 1. The queried pair's key sits at
// 1 + round(depth (L - 3)) (depth 0: at the start; 1: its value at L - 1, right before the
// query); the other K - 1 pairs are placed uniformly among the free starts and never asked.
//
// Torch-free and gRPC-free; the same ids for a seed on every platform (splitmix.h).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"

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
  kNearQuery,  // Weighted 1 / (the distance from the pair's value to the first query's key):
               // near the queries, as MQAR's power-law spacing trains.
  kMiddle,     // Weighted middle_factor where the pair's depth is in [0.1, 0.9], 1 elsewhere: the
               // middle 80 % of the context middle_factor times as often as uniform (the paper's
               // cure as data).
};

struct MqarOptions {
  int64_t length = 128;  // L: the row's input tokens.
  int64_t pairs = 8;     // K: key-value pairs; training rows: 5K <= L; probes: 3K <= L - 3.
  IdRange keys{128, 192};
  IdRange values{192, 256};
  IdRange filler{32, 127};
  Placement placement = Placement::kUniform;
  double middle_factor = 4;  // kMiddle's factor, in [1, 1e6].
};

struct MqarRow {
  std::vector<int64_t> tokens;          // L + 1 ids.
  std::vector<int64_t> answer_targets;  // 0-based target indices of the answers, in position order.
  std::vector<int64_t> key_positions;   // 1-based position of each asked pair's key, in the same order.
  std::vector<int64_t> other_key_positions;  // Those of the pairs never asked (a probe's distractors).
};

std::string PlacementName(Placement placement);
// "uniform", "near-query" or "middle"; INVALID_ARGUMENT naming --recall-placement otherwise.
absl::Status ParsePlacement(const std::string& name, Placement& placement);

// What the checks call the options: posbias-train's flags by default, a job's fields otherwise.
struct MqarNames {
  std::string pairs = "--recall-pairs", keys = "--key-ids", values = "--value-ids", filler = "--filler-ids";
};

// INVALID_ARGUMENT naming the option and what is allowed: non-empty ranges inside
// [0, vocab_size), pairwise disjoint, K distinct keys available, room to place every pair (a
// training row: 5K <= L; with `for_probes`, a probe: 3K <= L - 3), and a middle factor in [1, 1e6].
absl::Status CheckMqarOptions(const MqarOptions& options, int64_t vocab_size, const MqarNames& names = {},
                              bool for_probes = false);

// A training row drawn from `seed` (options checked by the caller).
MqarRow MakeMqarRow(const MqarOptions& options, uint64_t seed);

// A probe asking the pair at `depth` in [0, 1]: key_positions = {its key's position},
// answer_targets = {L - 1}, other_key_positions the distractors'.
MqarRow MakeMqarProbe(const MqarOptions& options, double depth, uint64_t seed);

// The depth of a probe's key position: (position - 1) / (L - 3).
double MqarProbeDepth(const MqarOptions& options, int64_t key_position);

// The task as a checkpoint's posbias_task.json records it (posbias-train, train/trainer.h):
// {"task": "recall", "length", "pairs", "keys": [first, last], "values": [..], "filler": [..],
// "placement", "middle_factor"}; and read back: nullopt unless it is such a record with ids in [0, 2^31) and
// options CheckMqarOptions takes for some vocabulary.
nlohmann::ordered_json MqarTaskJson(const MqarOptions& options);
std::optional<MqarOptions> MqarFromTaskJson(const nlohmann::json& json);

}  // namespace posbias::recall
