// Needle sweeps: per depth, the needle span's share of the total against the same positions of
// the filler alone, over fillers, computed by hand; and the sweep's layout survives the job spec.
#include "server/statistics/needle_sweep.h"

#include <cmath>

#include "gtest/gtest.h"

namespace posbias::statistics {
namespace {

using jobs::SpecFromJson;
using jobs::SpecToJson;
using jobs::JacobianJobSpec;

JacobianJobSpec::NeedleSweep TwoDepthsTwoFillers() {
  JacobianJobSpec::NeedleSweep sweep;
  sweep.depths = {0.0, 1.0};
  sweep.starts = {1, 4};  // L = 5, a needle of 2 tokens.
  sweep.needle_tokens = 2;
  // Filler 0 at depth 0, at depth 1, alone; then filler 1 the same.
  sweep.samples = {{0, 0}, {1, 0}, {-1, 0}, {0, 1}, {1, 1}, {-1, 1}};
  return sweep;
}

TEST(NeedleSweep, EachDepthHasTheSpansShareAndTheFillerAloneBaselineOverFillers) {
  const std::vector<std::vector<double>> x = {
      {3, 1, 1, 1, 4},  // Filler 0, needle at 1..2: share 4 / 10.
      {1, 1, 1, 2, 5},  // Filler 0, needle at 4..5: share 7 / 10.
      {2, 2, 2, 2, 2},  // Filler 0 alone: 1..2 -> 0.4, 4..5 -> 0.4.
      {1, 1, 1, 1, 1},  // Filler 1, depth 0: 0.4.
      {0, 0, 0, 1, 3},  // Filler 1, depth 1: 1.0.
      {4, 0, 0, 0, 4},  // Filler 1 alone: 1..2 -> 0.5, 4..5 -> 0.5.
  };
  const auto depths = NeedleSweepShares(TwoDepthsTwoFillers(), x);
  ASSERT_EQ(depths.size(), 2u);
  EXPECT_EQ(depths[0].start, 1);
  EXPECT_EQ(depths[0].fillers, 2);
  EXPECT_DOUBLE_EQ(depths[0].share_mean, 0.4);
  EXPECT_DOUBLE_EQ(depths[0].share_std, 0.0);
  EXPECT_DOUBLE_EQ(depths[0].baseline_share_mean, 0.45);
  EXPECT_NEAR(depths[0].baseline_share_std, std::sqrt(2 * 0.05 * 0.05), 1e-15);
  EXPECT_NEAR(depths[0].baseline_share_stderr, std::sqrt(2 * 0.05 * 0.05) / std::sqrt(2.0), 1e-15);
  EXPECT_DOUBLE_EQ(depths[1].depth, 1.0);
  EXPECT_DOUBLE_EQ(depths[1].share_mean, 0.85);
  EXPECT_NEAR(depths[1].share_stderr, std::sqrt(2 * 0.15 * 0.15) / std::sqrt(2.0), 1e-15);
  EXPECT_DOUBLE_EQ(depths[1].baseline_share_mean, 0.45);
}

TEST(NeedleSweep, AFillerWithoutItsBaselineOrWithAZeroProfileIsLeftOut) {
  auto sweep = TwoDepthsTwoFillers();
  sweep.samples.pop_back();  // Filler 1 has no baseline sample.
  const std::vector<std::vector<double>> x = {{3, 1, 1, 1, 4}, {1, 1, 1, 2, 5}, {0, 0, 0, 0, 0},
                                              {1, 1, 1, 1, 1}, {0, 0, 0, 1, 3}};
  const auto depths = NeedleSweepShares(sweep, x);
  EXPECT_EQ(depths[0].fillers, 0);
  EXPECT_EQ(depths[1].fillers, 0);
}

TEST(NeedleSweep, TheLayoutSurvivesTheJobSpecJson) {
  JacobianJobSpec spec;
  spec.needle_sweep = TwoDepthsTwoFillers();
  auto back = SpecFromJson(nlohmann::json::parse(SpecToJson(spec).dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->needle_sweep.has_value());
  EXPECT_EQ(back->needle_sweep->depths, spec.needle_sweep->depths);
  EXPECT_EQ(back->needle_sweep->starts, spec.needle_sweep->starts);
  EXPECT_EQ(back->needle_sweep->needle_tokens, 2);
  EXPECT_EQ(back->needle_sweep->samples, spec.needle_sweep->samples);
  EXPECT_FALSE(SpecFromJson(SpecToJson(JacobianJobSpec{}))->needle_sweep.has_value());
  auto bad = SpecToJson(spec);
  bad["needle_sweep"]["starts"] = {1};
  EXPECT_EQ(SpecFromJson(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace posbias::statistics
