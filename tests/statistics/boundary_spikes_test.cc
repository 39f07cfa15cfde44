// Boundary spike ratios: grouped by the samples that start a document at a position, the ratio of
// their mean profile beside the mean and standard error of their own ratios, computed by hand.
#include "server/statistics/boundary_spikes.h"

#include <cmath>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace posbias::statistics {
namespace {

using jobs::JacobianReport;
using jobs::ReportToJson;
using jobs::ReportFromJson;

TEST(BoundarySpikes, EachStartIsOwnGroupWithPerSampleStatistics) {
  // L = 8. Sample 0 starts documents at 1 and 4, sample 1 at 1, 4 and 6, sample 2 at 1 and 6.
  const std::vector<std::vector<int64_t>> starts = {{1, 4}, {1, 4, 6}, {1, 6}};
  const std::vector<std::vector<double>> x = {{1, 1, 1, 4, 1, 1, 1, 1},
                                              {2, 2, 2, 2, 2, 6, 2, 2},
                                              {1, 1, 1, 1, 1, 3, 1, 1}};
  const auto spikes = BoundarySpikes(starts, x);
  // b = 1 has no neighbours on its left: no spike there.
  ASSERT_EQ(spikes.size(), 2u);
  // b = 4: samples 0 (r = 4 / 1 = 4) and 1 (r = 2 / ((2 + 2 + 2 + 6) / 4) = 2 / 3).
  EXPECT_EQ(spikes[0].position, 4);
  EXPECT_EQ(spikes[0].samples, 2);
  EXPECT_DOUBLE_EQ(*spikes[0].ratio_mean, (4.0 + 2.0 / 3) / 2);
  const double std4 = std::sqrt((std::pow(4.0 - 7.0 / 3, 2) + std::pow(2.0 / 3 - 7.0 / 3, 2)) / 1);
  EXPECT_DOUBLE_EQ(*spikes[0].ratio_std, std4);
  EXPECT_DOUBLE_EQ(*spikes[0].ratio_stderr, std4 / std::sqrt(2.0));
  // The mean profile of samples 0 and 1: x_4 = 3, neighbours (1.5, 1.5, 1.5, 3.5).
  EXPECT_DOUBLE_EQ(spikes[0].ratio, 3.0 / (8.0 / 4));
  // b = 6 (= L - 2): samples 1 (r = 6 / 2 = 3) and 2 (r = 3 / 1 = 3).
  EXPECT_EQ(spikes[1].position, 6);
  EXPECT_DOUBLE_EQ(*spikes[1].ratio_mean, 3.0);
  EXPECT_DOUBLE_EQ(*spikes[1].ratio_std, 0.0);
}

TEST(BoundarySpikes, ASingleSampleHasNoSpreadAndAZeroNeighbourhoodIsLeftOut) {
  const auto one = BoundarySpikes({{3}}, {{1, 1, 2, 1, 1}});
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].samples, 1);
  EXPECT_DOUBLE_EQ(*one[0].ratio_std, 0.0);
  EXPECT_DOUBLE_EQ(*one[0].ratio_stderr, 0.0);
  EXPECT_TRUE(BoundarySpikes({{3}}, {{0, 0, 2, 0, 0}}).empty());
}

TEST(BoundarySpikes, OfMeansKeepsOnlyPositionsEverySampleShares) {
  const auto spikes = BoundarySpikesOfMeans({{1, 4, 6}, {1, 4}}, {1, 1, 1, 2, 1, 1, 1, 1});
  ASSERT_EQ(spikes.size(), 1u);
  EXPECT_EQ(spikes[0].position, 4);
  EXPECT_DOUBLE_EQ(spikes[0].ratio, 2.0);
  EXPECT_FALSE(spikes[0].ratio_mean.has_value());
}

TEST(BoundarySpikes, RoundTripThroughTheReportJson) {
  JacobianReport report;
  report.boundary_spikes = BoundarySpikes({{1, 4}, {1, 4, 6}, {1, 6}}, {{1, 1, 1, 4, 1, 1, 1, 1},
                                                                        {2, 2, 2, 2, 2, 6, 2, 2},
                                                                        {1, 1, 1, 1, 1, 3, 1, 1}});
  const auto json = ReportToJson(report);
  ASSERT_TRUE(json.contains("boundary_spikes"));
  EXPECT_EQ(json["boundary_spikes"][1]["samples"], 2);
  auto back = ReportFromJson(nlohmann::json::parse(json.dump()));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->boundary_spikes.has_value());
  ASSERT_EQ(back->boundary_spikes->size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    const auto& mine = (*back->boundary_spikes)[i];
    const auto& theirs = (*report.boundary_spikes)[i];
    EXPECT_EQ(mine.position, theirs.position);
    EXPECT_DOUBLE_EQ(mine.ratio, theirs.ratio);
    EXPECT_DOUBLE_EQ(*mine.ratio_stderr, *theirs.ratio_stderr);
    EXPECT_EQ(mine.samples, theirs.samples);
  }
  // A report without them (stored by an older server) reads as none.
  auto older = nlohmann::json::parse(json.dump());
  older.erase("boundary_spikes");
  EXPECT_FALSE(ReportFromJson(older)->boundary_spikes.has_value());
}

}  // namespace
}  // namespace posbias::statistics
