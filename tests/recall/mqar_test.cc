// Multi-query associative recall rows (recall/mqar.h): the layout the header draws, the probe's
// queried pair at its depth and asked last, distinct keys and pairs that never overlap, the same
// row for the same seed, a near-query placement that sits nearer the queries, and refusals that
// name their flag.
#include "server/recall/mqar.h"

#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace posbias::recall {
namespace {

MqarOptions Small() {
  MqarOptions options;
  options.length = 32;
  options.pairs = 3;
  return options;
}

// Every block where the row says, `asked` of the pairs asked (the last at position L), and filler
// everywhere else.
void ExpectWellFormed(const MqarOptions& options, const MqarRow& row, int64_t asked) {
  ASSERT_EQ(static_cast<int64_t>(row.tokens.size()), options.length + 1);
  ASSERT_EQ(static_cast<int64_t>(row.answer_targets.size()), asked);
  ASSERT_EQ(static_cast<int64_t>(row.other_key_positions.size()), options.pairs - asked);
  std::set<int64_t> keys, block_positions;  // 0-based.
  const auto block = [&](int64_t first) {
    EXPECT_TRUE(block_positions.insert(first).second && block_positions.insert(first + 1).second) << "blocks never overlap";
  };
  for (const int64_t at : row.other_key_positions) {
    EXPECT_TRUE(options.keys.Contains(row.tokens[at - 1]));
    EXPECT_TRUE(options.values.Contains(row.tokens[at]));
    EXPECT_TRUE(keys.insert(row.tokens[at - 1]).second) << "keys are distinct";
    block(at - 1);
  }
  for (int64_t q = 0; q < asked; ++q) {
    const int64_t query = row.answer_targets[q];  // 0-based index of the asked key.
    const int64_t key = row.tokens[query], value = row.tokens[query + 1];
    EXPECT_TRUE(options.keys.Contains(key));
    EXPECT_TRUE(options.values.Contains(value));
    EXPECT_TRUE(keys.insert(key).second) << "keys are distinct";
    const int64_t at = row.key_positions[q];  // 1-based.
    EXPECT_LT(at, query) << "the pair comes before its query";
    EXPECT_EQ(row.tokens[at - 1], key) << "the pair holds the asked key";
    EXPECT_EQ(row.tokens[at], value) << "and its value right after";
    block(at - 1);
    block(query);
    if (q > 0) {
      EXPECT_EQ(query, row.answer_targets[q - 1] + 2) << "the queries follow one another";
    }
  }
  EXPECT_EQ(row.answer_targets.back(), options.length - 1) << "the last query's key sits at position L";
  for (int64_t p = 0; p <= options.length; ++p) {
    if (!block_positions.count(p)) {
      EXPECT_TRUE(options.filler.Contains(row.tokens[p])) << "position " << p + 1;
    }
  }
}

// The number of queries a row asks, after checking it.
int64_t Asked(const MqarOptions& options, const MqarRow& row) {
  const auto asked = static_cast<int64_t>(row.answer_targets.size());
  EXPECT_GE(asked, 1);
  EXPECT_LE(asked, options.pairs);
  ExpectWellFormed(options, row, asked);
  return asked;
}

TEST(Mqar, ARowHoldsThePairsThenAsksSomeOfThemTheLastKeyAtPositionL) {
  const MqarOptions options = Small();
  std::set<int64_t> counts;
  for (uint64_t seed = 0; seed < 300; ++seed) counts.insert(Asked(options, MakeMqarRow(options, seed)));
  EXPECT_EQ(counts, (std::set<int64_t>{1, 2, 3})) << "every number of queries from 1 to K";
  MqarOptions crowded = Small();
  crowded.length = 30;
  crowded.pairs = 6;  // 5K = L: the most a row holds.
  for (uint64_t seed = 0; seed < 300; ++seed) Asked(crowded, MakeMqarRow(crowded, seed));
}

TEST(Mqar, TheSameSeedGivesTheSameRowAndAnotherSeedAnother) {
  const MqarOptions options = Small();
  EXPECT_EQ(MakeMqarRow(options, 7).tokens, MakeMqarRow(options, 7).tokens);
  EXPECT_NE(MakeMqarRow(options, 7).tokens, MakeMqarRow(options, 8).tokens);
}

TEST(Mqar, AProbeAsksOnlyThePairAtItsDepthWithTheKeyAtPositionL) {
  const MqarOptions options = Small();  // The key at 1 + round(depth x 29).
  for (const auto& [depth, position] : std::vector<std::pair<double, int64_t>>{{0.0, 1}, {0.5, 16}, {1.0, 30}}) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      const MqarRow probe = MakeMqarProbe(options, depth, seed);
      ExpectWellFormed(options, probe, 1);
      EXPECT_EQ(probe.key_positions.front(), position) << "depth " << depth;
      EXPECT_EQ(probe.tokens[options.length - 1], probe.tokens[position - 1]) << "position L holds the queried key";
      EXPECT_DOUBLE_EQ(MqarProbeDepth(options, probe.key_positions.front()), static_cast<double>(position - 1) / 29);
    }
  }
}

// The depth of the last query's pair in its row's haystack (which ends where the queries begin).
double LastDepth(const MqarOptions& options, const MqarRow& row) {
  Asked(options, row);
  return static_cast<double>(row.key_positions.back() - 1) / static_cast<double>(row.answer_targets.front() - 2);
}

double MeanLastDepth(const MqarOptions& options) {
  double sum = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) sum += LastDepth(options, MakeMqarRow(options, seed));
  return sum / 2000;
}

// The share of last-query pairs at depths in [0.1, 0.9].
double MiddleShare(const MqarOptions& options) {
  int middle = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    const double depth = LastDepth(options, MakeMqarRow(options, seed));
    middle += depth >= 0.1 && depth <= 0.9 ? 1 : 0;
  }
  return middle / 2000.0;
}

TEST(Mqar, PlacementsMoveThePairsWhereTheySay) {
  MqarOptions uniform = Small();
  uniform.length = 128;
  uniform.pairs = 8;
  MqarOptions near = uniform, middle = uniform;
  near.placement = Placement::kNearQuery;
  middle.placement = Placement::kMiddle;
  middle.middle_factor = 9;
  EXPECT_NEAR(MeanLastDepth(uniform), 0.5, 0.03) << "uniform over the context";
  EXPECT_GT(MeanLastDepth(near), 0.7) << "near-query: weighted toward the queries";
  // Uniform: about 80 % of the starts are in the middle band; a factor of 9 makes that 36 / 37
  // (less the pairs placed after others took the middle's room).
  EXPECT_NEAR(MiddleShare(uniform), 0.8, 0.04);
  EXPECT_GT(MiddleShare(middle), 0.93);
}

TEST(Mqar, RefusalsNameTheFlagAndWhatIsAllowed) {
  MqarOptions overlapping = Small();
  overlapping.values = {150, 200};
  EXPECT_THAT(std::string(CheckMqarOptions(overlapping, 257).message()),
              testing::AllOf(testing::HasSubstr("--value-ids"), testing::HasSubstr("disjoint from --key-ids 128:192")));
  MqarOptions beyond = Small();
  EXPECT_THAT(std::string(CheckMqarOptions(beyond, 200).message()),
              testing::AllOf(testing::HasSubstr("--value-ids"), testing::HasSubstr("192:256"), testing::HasSubstr("200")));
  MqarOptions crowded = Small();
  crowded.pairs = 7;
  EXPECT_THAT(std::string(CheckMqarOptions(crowded, 257).message()),
              testing::AllOf(testing::HasSubstr("--recall-pairs"), testing::HasSubstr("at most L / 5 = 6")));
  EXPECT_TRUE(CheckMqarOptions(crowded, 257, {}, /*for_probes=*/true).ok()) << "a probe holds 3K <= L - 3";
  crowded.pairs = 10;
  EXPECT_THAT(std::string(CheckMqarOptions(crowded, 257, {}, true).message()), testing::HasSubstr("at most (L - 3) / 3 = 9"));
  MqarOptions few_keys = Small();
  few_keys.keys = {128, 130};
  EXPECT_THAT(std::string(CheckMqarOptions(few_keys, 257).message()),
              testing::AllOf(testing::HasSubstr("--recall-pairs"), testing::HasSubstr("the 2 keys of --key-ids")));
  EXPECT_TRUE(CheckMqarOptions(Small(), 257).ok());
  Placement placement;
  EXPECT_THAT(std::string(ParsePlacement("edges", placement).message()), testing::HasSubstr("uniform, near-query or middle"));
  MqarOptions factor = Small();
  factor.middle_factor = 0.5;
  EXPECT_THAT(std::string(CheckMqarOptions(factor, 257).message()), testing::HasSubstr("--recall-middle-factor"));
}

TEST(Mqar, TheTaskRecordReadsBackAndAnythingElseReadsAsNoTask) {
  MqarOptions options = Small();
  options.keys = {130, 150};
  options.placement = Placement::kMiddle;
  options.middle_factor = 3;
  const auto back = MqarFromTaskJson(nlohmann::json::parse(MqarTaskJson(options).dump()));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->length, 32);
  EXPECT_EQ(back->pairs, 3);
  EXPECT_EQ(back->keys.first, 130);
  EXPECT_EQ(back->keys.last, 150);
  EXPECT_EQ(back->placement, Placement::kMiddle);
  EXPECT_DOUBLE_EQ(back->middle_factor, 3);
  for (const char* text : {R"({"task": "text"})", R"([1, 2])", R"({"task": "recall"})",
                           R"({"task": "recall", "length": 32, "pairs": 3, "keys": [0, 10], "values": [5, 20], "filler": [30, 40]})",
                           R"({"task": "recall", "length": 32, "pairs": 3, "keys": [0, 10], "values": [10, 20], "filler": [-5, 0]})",
                           R"({"task": "recall", "length": 32, "pairs": 3, "keys": [0, 10], "values": [10, 20], "filler": [20, 30], "placement": "edges"})",
                           R"({"task": "recall", "length": 18446744073709551615, "pairs": 3, "keys": [0, 10], "values": [10, 20], "filler": [20, 30]})"}) {
    EXPECT_FALSE(MqarFromTaskJson(nlohmann::json::parse(text)).has_value()) << text;
  }
}

}  // namespace
}  // namespace posbias::recall
