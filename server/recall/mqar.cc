#include "server/recall/mqar.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/recall/splitmix.h"
#include "server/status/error.h"

namespace posbias::recall {
namespace {

absl::Status FlagError(const std::string& flag, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, flag, value, allowed});
}

std::string RangeText(const IdRange& range) { return absl::StrCat(range.first, ":", range.last); }

int64_t Haystack(const MqarOptions& options) { return options.length + 1 - 2 * options.pairs; }

// The 0-based starts s in [0, H - 2] whose two positions are free.
std::vector<int64_t> FreeStarts(const std::vector<bool>& taken) {
  std::vector<int64_t> starts;
  for (size_t s = 0; s + 1 < taken.size(); ++s) {
    if (!taken[s] && !taken[s + 1]) starts.push_back(static_cast<int64_t>(s));
  }
  return starts;
}

int64_t DrawStart(const std::vector<int64_t>& starts, Placement placement, int64_t haystack, SplitMix64& stream) {
  if (placement == Placement::kUniform) return starts[stream.Below(starts.size())];
  double total = 0;
  for (const int64_t s : starts) total += 1.0 / static_cast<double>(haystack - 1 - s);
  double u = stream.Uniform() * total;
  for (const int64_t s : starts) {
    u -= 1.0 / static_cast<double>(haystack - 1 - s);
    if (u < 0) return s;
  }
  return starts.back();
}

// The row for pairs placed at `starts` (0-based, pair i's key at starts[i]); pair `last` (or a
// random order when last < 0) is asked last.
MqarRow Assemble(const MqarOptions& options, const std::vector<int64_t>& starts, int64_t last, SplitMix64& stream) {
  const int64_t pairs = options.pairs, haystack = Haystack(options);
  std::set<int64_t> used;
  std::vector<int64_t> keys, values;
  while (static_cast<int64_t>(keys.size()) < pairs) {
    const int64_t key = options.keys.first + static_cast<int64_t>(stream.Below(options.keys.size()));
    if (used.insert(key).second) keys.push_back(key);
  }
  for (int64_t i = 0; i < pairs; ++i) values.push_back(options.values.first + static_cast<int64_t>(stream.Below(options.values.size())));
  MqarRow row;
  row.tokens.resize(options.length + 1);
  for (int64_t p = 0; p < haystack; ++p) row.tokens[p] = options.filler.first + static_cast<int64_t>(stream.Below(options.filler.size()));
  for (int64_t i = 0; i < pairs; ++i) {
    row.tokens[starts[i]] = keys[i];
    row.tokens[starts[i] + 1] = values[i];
  }
  std::vector<int64_t> order(pairs);
  for (int64_t i = 0; i < pairs; ++i) order[i] = i;
  for (int64_t i = pairs - 1; i > 0; --i) std::swap(order[i], order[stream.Below(i + 1)]);  // Fisher-Yates.
  if (last >= 0) std::swap(*std::find(order.begin(), order.end(), last), order.back());
  for (int64_t q = 0; q < pairs; ++q) {
    const int64_t at = haystack + 2 * q;  // 0-based index of the query's key.
    row.tokens[at] = keys[order[q]];
    row.tokens[at + 1] = values[order[q]];
    row.answer_targets.push_back(at);  // Target index at = the prediction of token at + 1 (0-based).
    row.key_positions.push_back(starts[order[q]] + 1);
  }
  return row;
}

}  // namespace

std::string PlacementName(Placement placement) {
  return placement == Placement::kUniform ? "uniform" : "near-query";
}

absl::Status ParsePlacement(const std::string& name, Placement& placement) {
  if (name == "uniform") placement = Placement::kUniform;
  else if (name == "near-query") placement = Placement::kNearQuery;
  else return FlagError("--recall-placement", name, "uniform or near-query");
  return absl::OkStatus();
}

absl::Status CheckMqarOptions(const MqarOptions& o, int64_t vocab_size) {
  const std::pair<const char*, const IdRange*> ranges[] = {
      {"--key-ids", &o.keys}, {"--value-ids", &o.values}, {"--filler-ids", &o.filler}};
  for (const auto& [flag, range] : ranges) {
    if (range->first < 0 || range->size() < 1 || range->last > vocab_size) {
      return FlagError(flag, RangeText(*range), absl::StrCat("ids FIRST:LAST with 0 <= FIRST < LAST <= the vocabulary's ", vocab_size));
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i + 1; j < 3; ++j) {
      if (ranges[i].second->Overlaps(*ranges[j].second)) {
        return FlagError(ranges[j].first, RangeText(*ranges[j].second),
                         absl::StrCat("ids disjoint from ", ranges[i].first, " ", RangeText(*ranges[i].second)));
      }
    }
  }
  if (o.pairs < 1 || o.pairs > o.keys.size()) {
    return FlagError("--recall-pairs", absl::StrCat(o.pairs), absl::StrCat("1 .. the ", o.keys.size(), " keys of --key-ids"));
  }
  if (3 * o.pairs > Haystack(o) - 1) {
    return FlagError("--recall-pairs", absl::StrCat(o.pairs),
                     absl::StrCat("at most L / 5 = ", o.length / 5, " at --length ", o.length,
                                  " (the haystack of L + 1 - 2K positions holds the K pairs with room to place each)"));
  }
  return absl::OkStatus();
}

MqarRow MakeMqarRow(const MqarOptions& options, uint64_t seed) {
  SplitMix64 stream(seed);
  const int64_t haystack = Haystack(options);
  std::vector<bool> taken(haystack, false);
  std::vector<int64_t> starts;
  for (int64_t i = 0; i < options.pairs; ++i) {
    const int64_t s = DrawStart(FreeStarts(taken), options.placement, haystack, stream);
    taken[s] = taken[s + 1] = true;
    starts.push_back(s);
  }
  return Assemble(options, starts, -1, stream);
}

MqarRow MakeMqarProbe(const MqarOptions& options, double depth, uint64_t seed) {
  SplitMix64 stream(seed);
  const int64_t haystack = Haystack(options);
  std::vector<bool> taken(haystack, false);
  const auto queried = static_cast<int64_t>(std::llround(std::clamp(depth, 0.0, 1.0) * static_cast<double>(haystack - 2)));
  std::vector<int64_t> starts{queried};
  taken[queried] = taken[queried + 1] = true;
  for (int64_t i = 1; i < options.pairs; ++i) {
    const int64_t s = DrawStart(FreeStarts(taken), Placement::kUniform, haystack, stream);
    taken[s] = taken[s + 1] = true;
    starts.push_back(s);
  }
  return Assemble(options, starts, 0, stream);
}

double MqarDepth(const MqarOptions& options, int64_t key_position) {
  return static_cast<double>(key_position - 1) / static_cast<double>(Haystack(options) - 2);
}

}  // namespace posbias::recall
