#include "server/density/comparison.h"

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "server/density/discrete.h"
#include "server/density/routing.h"

namespace posbias::density {
namespace {

std::vector<double> CoherentRow(uint32_t depth, double alpha, uint64_t length) {
  auto profiles = ComputeDiscreteProfiles(*MakeRouting(depth, alpha), length);
  EXPECT_TRUE(profiles.ok()) << profiles.status();
  return profiles.ok() ? profiles->coherent : std::vector<double>{};
}

TEST(Normalized, ScalesToSumOneAndLeavesAllZeroInputAlone) {
  const std::vector<double> values = {1, 3, 4};
  EXPECT_EQ(Normalized(values), (std::vector<double>{0.125, 0.375, 0.5}));
  const std::vector<double> zeros = {0, 0};
  EXPECT_EQ(Normalized(zeros), zeros);
}

TEST(SpearmanCorrelation, PerfectMonotoneRelationIsOneAndReversedIsMinusOne) {
  const std::vector<double> a = {0.1, 0.5, 2.0, 3.0, 10.0};
  std::vector<double> increasing, decreasing;
  for (double value : a) {
    increasing.push_back(std::exp(value));  // Nonlinear but monotone: ranks agree.
    decreasing.push_back(-value * value);
  }
  EXPECT_DOUBLE_EQ(SpearmanCorrelation(a, increasing), 1.0);
  EXPECT_DOUBLE_EQ(SpearmanCorrelation(a, decreasing), -1.0);
  EXPECT_DOUBLE_EQ(SpearmanCorrelation(a, a), 1.0);
}

TEST(SpearmanCorrelation, TiesShareTheirAverageRank) {
  // Ranks (1, 2.5, 2.5, 4) against (1, 3, 2, 4): cov 4.5, variances 4.5 and 5 -> 3 / sqrt(10).
  const std::vector<double> a = {1, 2, 2, 3};
  const std::vector<double> b = {1, 3, 2, 4};
  EXPECT_NEAR(SpearmanCorrelation(a, b), 3.0 / std::sqrt(10.0), 1e-15);
  EXPECT_NEAR(SpearmanCorrelation(b, a), 3.0 / std::sqrt(10.0), 1e-15);
  // Ties on both sides, unsorted: ranks (3, 1, 5, 3, 3) against (1.5, 1.5, 4.5, 3, 4.5)...
  const std::vector<double> c = {20, 10, 30, 20, 20};
  const std::vector<double> d = {5, 5, 7, 6, 7};
  // ... deviations (0, -2, 2, 0, 0) and (-1.5, -1.5, 1.5, 0, 1.5): cov 6, variances 8 and 9.
  EXPECT_NEAR(SpearmanCorrelation(c, d), 6.0 / std::sqrt(72.0), 1e-15);
}

TEST(SpearmanCorrelation, ConstantSideGivesZero) {
  const std::vector<double> constant = {2, 2, 2, 2};
  const std::vector<double> varying = {1, 2, 3, 4};
  EXPECT_EQ(SpearmanCorrelation(constant, varying), 0.0);
  EXPECT_EQ(SpearmanCorrelation(varying, constant), 0.0);
}

TEST(PearsonOfLogs, PowerLawsAreExactlyCorrelated) {
  const double e = std::exp(1.0);
  const std::vector<double> a = {1, e, e * e, e * e * e};
  const std::vector<double> b = {2, 2 * e * e, 2 * std::pow(e, 4), 2 * std::pow(e, 6)};
  EXPECT_NEAR(PearsonOfLogs(a, b), 1.0, 1e-15);
  const std::vector<double> inverse = {1, 1 / e, 1 / (e * e), 1 / (e * e * e)};
  EXPECT_NEAR(PearsonOfLogs(a, inverse), -1.0, 1e-15);
}

TEST(PearsonOfLogs, MatchesAHandComputedValueAndSkipsNonPositivePositions) {
  const double e = std::exp(1.0);
  // Logs (0, 1, 2) against (0, 2, 1): cov 1, variances 2 and 2 -> 1/2. Position 1 is dropped.
  const std::vector<double> a = {0.0, 1, e, e * e};
  const std::vector<double> b = {5.0, 1, e * e, e};
  EXPECT_NEAR(PearsonOfLogs(a, b), 0.5, 1e-15);
  const std::vector<double> c = {7.0, 1, e, e * e, 3.0};
  const std::vector<double> d = {0.0, 1, e * e, e, -1.0};
  EXPECT_NEAR(PearsonOfLogs(c, d), 0.5, 1e-15);
}

TEST(PearsonOfLogs, FewerThanTwoUsablePositionsGiveZero) {
  const std::vector<double> a = {0, 1, 2};
  const std::vector<double> b = {1, 0, 3};
  EXPECT_EQ(PearsonOfLogs(a, b), 0.0);
}

TEST(RmseOfLogs, IsTheRootMeanSquareOfLogDifferences) {
  const double e = std::exp(1.0);
  // Differences -1, 0, 2.
  const std::vector<double> a = {1, e, 1};
  const std::vector<double> b = {e, e, 1 / (e * e)};
  EXPECT_NEAR(RmseOfLogs(a, b), std::sqrt(5.0 / 3.0), 1e-15);
  EXPECT_EQ(RmseOfLogs(a, a), 0.0);
}

TEST(RmseOfLogs, IsInfiniteWhenTheModelIsZeroWhereTheMeasurementIsPositive) {
  const std::vector<double> measured = {0.5, 0.25, 0.25};
  const std::vector<double> model = {0.5, 0.5, 0.0};
  EXPECT_EQ(RmseOfLogs(measured, model), std::numeric_limits<double>::infinity());
}

TEST(RmseOfLogs, SkipsPositionsWhereTheMeasurementIsZero) {
  const double e = std::exp(1.0);
  const std::vector<double> measured = {0.0, 1.0, e};
  const std::vector<double> model = {0.0, e, e};  // Model zero where measured zero is fine.
  EXPECT_NEAR(RmseOfLogs(measured, model), std::sqrt(0.5), 1e-15);
  const std::vector<double> zeros = {0.0, 0.0, 0.0};
  EXPECT_EQ(RmseOfLogs(zeros, model), 0.0);
}

TEST(CompareProfiles, OppositeEndsAreAtKolmogorovDistanceOneAndWassersteinThreeQuarters) {
  // All mass at x = 1/4 against all at x = 1: the CDFs differ by 1 on three of four cells.
  const std::vector<double> first = {1, 0, 0, 0};
  const std::vector<double> last = {0, 0, 0, 1};
  const ComparisonMetrics metrics = CompareProfiles(first, last);
  EXPECT_DOUBLE_EQ(metrics.ks, 1.0);
  EXPECT_DOUBLE_EQ(metrics.wasserstein1, 0.75);
  EXPECT_EQ(metrics.rmse_log, std::numeric_limits<double>::infinity());
}

TEST(CompareProfiles, DistancesAndLevelsOfASmallHandExample) {
  // Uniform (1/4 each) against (1/2, 1/4, 1/4, 0) after normalization: CDFs (.25, .5, .75, 1) and
  // (.5, .75, 1, 1) differ by .25, .25, .25, 0.
  const std::vector<double> measured = {3, 3, 3, 3};
  const std::vector<double> model = {2, 1, 1, 0};
  const ComparisonMetrics metrics = CompareProfiles(measured, model);
  EXPECT_DOUBLE_EQ(metrics.ks, 0.25);
  EXPECT_DOUBLE_EQ(metrics.wasserstein1, 0.1875);
  EXPECT_DOUBLE_EQ(metrics.measured_last_weight, 0.25);
  EXPECT_DOUBLE_EQ(metrics.model_last_weight, 0.0);
  EXPECT_DOUBLE_EQ(metrics.measured_floor, 0.25);
  EXPECT_DOUBLE_EQ(metrics.model_floor, 0.0);
  EXPECT_DOUBLE_EQ(metrics.measured_last_jump, 1.0);
  EXPECT_DOUBLE_EQ(metrics.model_last_jump, 0.0);
  EXPECT_EQ(metrics.spearman, 0.0);  // The measured side is constant.
}

TEST(CompareProfiles, IdenticalProfilesUpToScaleAgreePerfectly) {
  const std::vector<double> model = CoherentRow(12, 0.3, 256);
  std::vector<double> scaled = model;
  for (double& value : scaled) value *= 1e6;
  const ComparisonMetrics metrics = CompareProfiles(scaled, model);
  EXPECT_NEAR(metrics.spearman, 1.0, 1e-12);
  EXPECT_NEAR(metrics.pearson_log, 1.0, 1e-12);
  EXPECT_NEAR(metrics.rmse_log, 0.0, 1e-12);
  EXPECT_NEAR(metrics.ks, 0.0, 1e-12);
  EXPECT_NEAR(metrics.wasserstein1, 0.0, 1e-12);
  EXPECT_NEAR(metrics.measured_last_jump, metrics.model_last_jump, 1e-9);
}

TEST(CompareProfiles, RankCorrelationCannotTellOneOverJFromTheRoutingModelButLogLevelsCan) {
  // THEORY.md section 7: any decreasing profile with an end spike scores ~0.999 in Spearman.
  const uint64_t length = 1024;
  const std::vector<double> coherent = CoherentRow(24, 0.5, length);
  std::vector<double> harmonic(length);
  for (uint64_t j = 1; j < length; ++j) harmonic[j - 1] = 1.0 / static_cast<double>(j);
  harmonic[length - 1] = 10.0;  // The end spike.
  const ComparisonMetrics metrics = CompareProfiles(harmonic, coherent);
  std::printf("1/j vs coherent: spearman %.6f, pearson_log %.4f, rmse_log %.3f, ks %.3f, w1 %.3f\n",
              metrics.spearman, metrics.pearson_log, metrics.rmse_log, metrics.ks,
              metrics.wasserstein1);
  EXPECT_GT(metrics.spearman, 0.99);
  EXPECT_GT(metrics.rmse_log, 2.0);  // Typical model-to-data ratio e^2 or more.
  EXPECT_GT(metrics.ks, 0.1);
}

TEST(CompareProfiles, RankCorrelationCannotTellTheIncoherentModelFromTheCoherentOne) {
  // THEORY.md section 5: d v_j^2 and the incoherent sum are both monotone with an end spike.
  const uint64_t length = 96;
  auto profiles = ComputeDiscreteProfiles(*MakeRouting(6, 0.5), length);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  std::vector<double> squared = profiles->coherent;
  for (double& value : squared) value *= value;
  const ComparisonMetrics metrics = CompareProfiles(profiles->incoherent, squared);
  std::printf("incoherent vs coherent^2: spearman %.6f, rmse_log %.3f\n", metrics.spearman,
              metrics.rmse_log);
  EXPECT_GT(metrics.spearman, 0.99);
  EXPECT_GT(metrics.rmse_log, 0.5);
}

}  // namespace
}  // namespace posbias::density
