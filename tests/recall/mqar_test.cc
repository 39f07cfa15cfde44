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

// The haystack's length H = L + 1 - 2K.
int64_t Haystack(const MqarOptions& options) { return options.length + 1 - 2 * options.pairs; }

void ExpectWellFormed(const MqarOptions& options, const MqarRow& row) {
  const int64_t haystack = Haystack(options);
  ASSERT_EQ(static_cast<int64_t>(row.tokens.size()), options.length + 1);
  ASSERT_EQ(static_cast<int64_t>(row.answer_targets.size()), options.pairs);
  std::set<int64_t> keys, pair_positions;
  for (int64_t q = 0; q < options.pairs; ++q) {
    const int64_t query = haystack + 2 * q;  // 0-based index of the asked key.
    EXPECT_EQ(row.answer_targets[q], query) << "the answer is the target predicted at the asked key";
    const int64_t key = row.tokens[query], value = row.tokens[query + 1];
    EXPECT_TRUE(options.keys.Contains(key));
    EXPECT_TRUE(options.values.Contains(value));
    EXPECT_TRUE(keys.insert(key).second) << "keys are distinct";
    const int64_t at = row.key_positions[q];  // 1-based.
    ASSERT_GE(at, 1);
    ASSERT_LE(at, haystack - 1);
    EXPECT_EQ(row.tokens[at - 1], key) << "the haystack holds the asked key at its position";
    EXPECT_EQ(row.tokens[at], value) << "and its value right after";
    EXPECT_TRUE(pair_positions.insert(at).second && pair_positions.insert(at + 1).second) << "pairs never overlap";
  }
  for (int64_t p = 1; p <= haystack; ++p) {
    if (!pair_positions.count(p)) {
      EXPECT_TRUE(options.filler.Contains(row.tokens[p - 1])) << "position " << p;
    }
  }
}

TEST(Mqar, ARowIsHaystackThenEveryKeyAskedOnceWithItsValue) {
  const MqarOptions options = Small();
  for (uint64_t seed = 0; seed < 200; ++seed) ExpectWellFormed(options, MakeMqarRow(options, seed));
}

TEST(Mqar, TheSameSeedGivesTheSameRowAndAnotherSeedAnother) {
  const MqarOptions options = Small();
  EXPECT_EQ(MakeMqarRow(options, 7).tokens, MakeMqarRow(options, 7).tokens);
  EXPECT_NE(MakeMqarRow(options, 7).tokens, MakeMqarRow(options, 8).tokens);
}

TEST(Mqar, AProbeAsksThePairAtItsDepthLast) {
  const MqarOptions options = Small();  // H = 27: the key at 1 + round(depth x 25).
  for (const auto& [depth, position] : std::vector<std::pair<double, int64_t>>{{0.0, 1}, {0.5, 14}, {1.0, 26}}) {
    for (uint64_t seed = 0; seed < 50; ++seed) {
      const MqarRow probe = MakeMqarProbe(options, depth, seed);
      ExpectWellFormed(options, probe);
      EXPECT_EQ(probe.key_positions.back(), position) << "depth " << depth;
      EXPECT_EQ(probe.answer_targets.back(), options.length - 1) << "the last target is the answer after position L";
      EXPECT_DOUBLE_EQ(MqarDepth(options, probe.key_positions.back()), static_cast<double>(position - 1) / 25);
    }
  }
}

TEST(Mqar, NearQueryPlacementPutsThePairsNearerTheQueriesThanUniform) {
  MqarOptions uniform = Small(), near = Small();
  uniform.length = near.length = 128;
  uniform.pairs = near.pairs = 8;
  near.placement = Placement::kNearQuery;
  double uniform_sum = 0, near_sum = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    for (const int64_t p : MakeMqarRow(uniform, seed).key_positions) uniform_sum += static_cast<double>(p);
    const MqarRow row = MakeMqarRow(near, seed);
    ExpectWellFormed(near, row);
    for (const int64_t p : row.key_positions) near_sum += static_cast<double>(p);
  }
  const double rows = 400 * 8;
  EXPECT_NEAR(uniform_sum / rows, 57.0, 3.0) << "uniform: the mean start near the haystack's middle (H = 113)";
  EXPECT_GT(near_sum / rows, 70.0) << "near-query: weighted toward the queries";
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
  MqarOptions few_keys = Small();
  few_keys.keys = {128, 130};
  EXPECT_THAT(std::string(CheckMqarOptions(few_keys, 257).message()),
              testing::AllOf(testing::HasSubstr("--recall-pairs"), testing::HasSubstr("the 2 keys of --key-ids")));
  EXPECT_TRUE(CheckMqarOptions(Small(), 257).ok());
  Placement placement;
  EXPECT_THAT(std::string(ParsePlacement("middle", placement).message()), testing::HasSubstr("uniform or near-query"));
}

}  // namespace
}  // namespace posbias::recall
