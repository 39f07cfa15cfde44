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

// The 0-based starts s whose two positions s, s + 1 are free, below `end`.
std::vector<int64_t> FreeStarts(const std::vector<bool>& taken, int64_t end) {
  std::vector<int64_t> starts;
  for (int64_t s = 0; s + 1 < static_cast<int64_t>(taken.size()) && s < end; ++s) {
    if (!taken[s] && !taken[s + 1]) starts.push_back(s);
  }
  return starts;
}

// One of `starts` drawn with probability proportional to weight(start).
template <typename Weight>
int64_t DrawWeighted(const std::vector<int64_t>& starts, const Weight& weight, SplitMix64& stream) {
  double total = 0;
  for (const int64_t s : starts) total += weight(s);
  double u = stream.Uniform() * total;
  for (const int64_t s : starts) {
    u -= weight(s);
    if (u < 0) return s;
  }
  return starts.back();
}

// A pair's start among the free starts of a haystack of `haystack` positions (the first query's
// key right after it), weighted as `placement` says by the pair's depth t / (haystack - 2).
int64_t DrawPairStart(const MqarOptions& options, Placement placement, int64_t haystack, const std::vector<bool>& taken,
                      SplitMix64& stream) {
  const std::vector<int64_t> starts = FreeStarts(taken, haystack - 1);  // The pair ends inside the haystack.
  switch (placement) {
    case Placement::kUniform:
      return starts[stream.Below(starts.size())];
    case Placement::kNearQuery:  // 1 / (the distance from the pair's value to the first query's key).
      return DrawWeighted(starts, [&](int64_t t) { return 1.0 / static_cast<double>(haystack - 1 - t); }, stream);
    case Placement::kMiddle:
      return DrawWeighted(starts, [&](int64_t t) {
        const double depth = static_cast<double>(t) / static_cast<double>(haystack - 2);
        return depth >= 0.1 && depth <= 0.9 ? options.middle_factor : 1.0;
      }, stream);
  }
  return starts.front();
}

void Take(std::vector<bool>& taken, int64_t start) { taken[start] = taken[start + 1] = true; }

// The ids of a layout: pair i's key at pair_starts[i] and its value after it; its query (key, then
// value) at query_starts[i] when that is >= 0; filler elsewhere. Queries are listed in position order.
MqarRow Fill(const MqarOptions& options, const std::vector<int64_t>& pair_starts, const std::vector<int64_t>& query_starts,
             SplitMix64& stream) {
  const int64_t pairs = options.pairs;
  std::set<int64_t> used;
  std::vector<int64_t> keys, values;
  while (static_cast<int64_t>(keys.size()) < pairs) {
    const int64_t key = options.keys.first + static_cast<int64_t>(stream.Below(options.keys.size()));
    if (used.insert(key).second) keys.push_back(key);
  }
  for (int64_t i = 0; i < pairs; ++i) values.push_back(options.values.first + static_cast<int64_t>(stream.Below(options.values.size())));
  MqarRow row;
  row.tokens.resize(options.length + 1);
  for (auto& id : row.tokens) id = options.filler.first + static_cast<int64_t>(stream.Below(options.filler.size()));
  std::vector<std::pair<int64_t, int64_t>> queries;  // (start, pair).
  for (int64_t i = 0; i < pairs; ++i) {
    row.tokens[pair_starts[i]] = keys[i];
    row.tokens[pair_starts[i] + 1] = values[i];
    if (query_starts[i] < 0) {
      row.other_key_positions.push_back(pair_starts[i] + 1);
      continue;
    }
    row.tokens[query_starts[i]] = keys[i];
    row.tokens[query_starts[i] + 1] = values[i];
    queries.emplace_back(query_starts[i], i);
  }
  std::sort(queries.begin(), queries.end());
  for (const auto& [start, pair] : queries) {
    row.answer_targets.push_back(start);  // Target index `start` predicts token start + 1 (0-based).
    row.key_positions.push_back(pair_starts[pair] + 1);
  }
  return row;
}

}  // namespace

std::string PlacementName(Placement placement) {
  switch (placement) {
    case Placement::kUniform: return "uniform";
    case Placement::kNearQuery: return "near-query";
    case Placement::kMiddle: return "middle";
  }
  return "uniform";
}

absl::Status ParsePlacement(const std::string& name, Placement& placement) {
  if (name == "uniform") placement = Placement::kUniform;
  else if (name == "near-query") placement = Placement::kNearQuery;
  else if (name == "middle") placement = Placement::kMiddle;
  else return FlagError("--recall-placement", name, "uniform, near-query or middle");
  return absl::OkStatus();
}

absl::Status CheckMqarOptions(const MqarOptions& o, int64_t vocab_size, const MqarNames& names, bool for_probes) {
  const std::pair<const std::string*, const IdRange*> ranges[] = {
      {&names.keys, &o.keys}, {&names.values, &o.values}, {&names.filler, &o.filler}};
  for (const auto& [name, range] : ranges) {
    if (range->first < 0 || range->size() < 1 || range->last > vocab_size) {
      return FlagError(*name, RangeText(*range), absl::StrCat("ids FIRST:LAST with 0 <= FIRST < LAST <= the vocabulary's ", vocab_size));
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    for (size_t j = i + 1; j < 3; ++j) {
      if (ranges[i].second->Overlaps(*ranges[j].second)) {
        return FlagError(*ranges[j].first, RangeText(*ranges[j].second),
                         absl::StrCat("ids disjoint from ", *ranges[i].first, " ", RangeText(*ranges[i].second)));
      }
    }
  }
  if (o.pairs < 1 || o.pairs > o.keys.size()) {
    return FlagError(names.pairs, absl::StrCat(o.pairs), absl::StrCat("1 .. the ", o.keys.size(), " keys of ", names.keys));
  }
  if (for_probes && 3 * o.pairs > o.length - 3) {
    return FlagError(names.pairs, absl::StrCat(o.pairs),
                     absl::StrCat("at most (L - 3) / 3 = ", (o.length - 3) / 3, " at L = ", o.length,
                                  " (a probe's L - 1 context positions hold the pairs with room to place each)"));
  }
  if (!for_probes && 5 * o.pairs > o.length) {
    return FlagError(names.pairs, absl::StrCat(o.pairs),
                     absl::StrCat("at most L / 5 = ", o.length / 5, " at --length ", o.length,
                                  " (a row's haystack of L + 1 - 2K positions holds the K pairs with room to place each)"));
  }
  if (!(o.middle_factor >= 1 && o.middle_factor <= 1e6)) {
    return FlagError("--recall-middle-factor", absl::StrCat(o.middle_factor), "a factor in [1, 1e6]");
  }
  return absl::OkStatus();
}

// The row with the pairs at `pair_starts` in a haystack of L + 1 - 2m positions, then the query
// section asking the pairs `asked` (m of them) in that order, the last key at position L.
MqarRow Section(const MqarOptions& options, const std::vector<int64_t>& pair_starts, const std::vector<int64_t>& asked,
                SplitMix64& stream) {
  const int64_t haystack = options.length + 1 - 2 * static_cast<int64_t>(asked.size());
  std::vector<int64_t> query_starts(options.pairs, -1);
  for (size_t q = 0; q < asked.size(); ++q) query_starts[asked[q]] = haystack + 2 * static_cast<int64_t>(q);
  return Fill(options, pair_starts, query_starts, stream);
}

MqarRow MakeMqarRow(const MqarOptions& options, uint64_t seed) {
  SplitMix64 stream(seed);
  const int64_t asked = 1 + static_cast<int64_t>(stream.Below(options.pairs));  // m in 1..K.
  const int64_t haystack = options.length + 1 - 2 * asked;
  std::vector<bool> taken(haystack, false);
  std::vector<int64_t> pair_starts;
  for (int64_t i = 0; i < options.pairs; ++i) {
    pair_starts.push_back(DrawPairStart(options, options.placement, haystack, taken, stream));
    Take(taken, pair_starts.back());
  }
  std::vector<int64_t> order(options.pairs);
  for (int64_t i = 0; i < options.pairs; ++i) order[i] = i;
  for (int64_t i = options.pairs - 1; i > 0; --i) std::swap(order[i], order[stream.Below(i + 1)]);  // Fisher-Yates.
  order.resize(asked);
  return Section(options, pair_starts, order, stream);
}

MqarRow MakeMqarProbe(const MqarOptions& options, double depth, uint64_t seed) {
  SplitMix64 stream(seed);
  const int64_t haystack = options.length - 1;
  std::vector<bool> taken(haystack, false);
  std::vector<int64_t> pair_starts{static_cast<int64_t>(std::llround(std::clamp(depth, 0.0, 1.0) * static_cast<double>(haystack - 2)))};
  Take(taken, pair_starts[0]);
  for (int64_t i = 1; i < options.pairs; ++i) {
    pair_starts.push_back(DrawPairStart(options, Placement::kUniform, haystack, taken, stream));
    Take(taken, pair_starts.back());
  }
  return Section(options, pair_starts, {0}, stream);
}

double MqarProbeDepth(const MqarOptions& options, int64_t key_position) {
  return static_cast<double>(key_position - 1) / static_cast<double>(options.length - 3);
}

nlohmann::ordered_json MqarTaskJson(const MqarOptions& options) {
  return {{"task", "recall"},
          {"length", options.length},
          {"pairs", options.pairs},
          {"keys", {options.keys.first, options.keys.last}},
          {"values", {options.values.first, options.values.last}},
          {"filler", {options.filler.first, options.filler.last}},
          {"placement", PlacementName(options.placement)},
          {"middle_factor", options.middle_factor}};
}

std::optional<MqarOptions> MqarFromTaskJson(const nlohmann::json& json) {
  constexpr int64_t kMaxId = int64_t{1} << 31;
  const auto count = [&](const char* key, int64_t& out) {
    const auto it = json.find(key);
    if (it == json.end() || !it->is_number_integer() || it->get<int64_t>() < 1 || it->get<int64_t>() > kMaxId) return false;
    out = it->get<int64_t>();
    return true;
  };
  const auto range = [&](const char* key, IdRange& out) {
    const auto it = json.find(key);
    if (it == json.end() || !it->is_array() || it->size() != 2) return false;
    for (const auto& id : *it) {
      if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > kMaxId) return false;
    }
    out = {(*it)[0].get<int64_t>(), (*it)[1].get<int64_t>()};
    return true;
  };
  if (!json.is_object() || json.value("task", nlohmann::json()) != "recall") return std::nullopt;
  MqarOptions options;
  if (!count("length", options.length) || !count("pairs", options.pairs) || !range("keys", options.keys) ||
      !range("values", options.values) || !range("filler", options.filler)) {
    return std::nullopt;
  }
  if (const auto it = json.find("middle_factor"); it != json.end()) {
    if (!it->is_number()) return std::nullopt;
    options.middle_factor = it->get<double>();
  }
  if (const auto it = json.find("placement"); it != json.end()) {
    if (!it->is_string() || !ParsePlacement(it->get<std::string>(), options.placement).ok()) return std::nullopt;
  }
  if (!CheckMqarOptions(options, kMaxId).ok()) return std::nullopt;
  return options;
}

}  // namespace posbias::recall
