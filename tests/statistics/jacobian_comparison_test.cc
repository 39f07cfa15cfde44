// Paired comparisons of profiles (THEORY.md section 11) on profiles whose statistics are known in
// closed form: shares of hand-built bands, log ratios of scaled middles, and bootstrap intervals
// that shrink to the mean when every sample agrees.
#include "server/statistics/jacobian_comparison.h"

#include <cmath>

#include "gtest/gtest.h"

namespace posbias::statistics {
namespace {

// L = 20: bands of 2, 16 and 2 positions. Edge values `edge`, middle values `middle`.
std::vector<double> Valley(double edge, double middle) {
  std::vector<double> profile(20, middle);
  for (int j : {0, 1, 18, 19}) profile[j] = edge;
  return profile;
}

TEST(BandShares, TheEdgeBandsAreATenthOfThePositionsAtLeastOne) {
  EXPECT_EQ(EdgeBandPositions(3), 1);
  EXPECT_EQ(EdgeBandPositions(20), 2);
  EXPECT_EQ(EdgeBandPositions(64), 6);
  auto shares = SharesOf(Valley(4.0, 1.0));  // Total 4 * 4 + 16 = 32.
  ASSERT_TRUE(shares.ok());
  EXPECT_DOUBLE_EQ(shares->leading, 0.25);
  EXPECT_DOUBLE_EQ(shares->middle, 0.5);
  EXPECT_DOUBLE_EQ(shares->trailing, 0.25);
  EXPECT_DOUBLE_EQ(shares->first, 0.125);
  EXPECT_DOUBLE_EQ(shares->last, 0.125);
}

TEST(BandShares, RefuseProfilesWithoutAMiddleOrWithoutMass) {
  EXPECT_EQ(SharesOf({1.0, 2.0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharesOf({0.0, 0.0, 0.0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharesOf({1.0, -1.0, 1.0}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SharesOf({1.0, NAN, 1.0}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Birth: middle share 1/2 in every sample. Trained: edges 4 times heavier (middle 16 / 80 = 1/5),
// so log(middle ratio) = log(2/5) in every sample, with no spread and a point interval.
TEST(PairedComparison, ADeeperValleyIsANegativeMiddleLogRatioWithoutSpreadWhenSamplesAgree) {
  const std::vector<std::vector<double>> birth(5, Valley(4.0, 1.0));
  const std::vector<std::vector<double>> trained(5, Valley(16.0, 1.0));
  auto comparison = CompareProfilesPaired(birth, trained);
  ASSERT_TRUE(comparison.ok()) << comparison.status();
  EXPECT_NEAR(comparison->middle.mean, 0.2, 1e-15);
  EXPECT_NEAR(comparison->middle_log_ratio.moments.mean, std::log(0.4), 1e-12);
  EXPECT_NEAR(comparison->middle_log_ratio.moments.standard_error, 0.0, 1e-15);
  EXPECT_NEAR(comparison->middle_log_ratio.low, std::log(0.4), 1e-12);
  EXPECT_NEAR(comparison->middle_log_ratio.high, std::log(0.4), 1e-12);
  // First weight: 4/32 at birth, 16/80 trained.
  EXPECT_NEAR(comparison->first_log_ratio.moments.mean, std::log(0.2 / 0.125), 1e-12);
  EXPECT_EQ(comparison->middle_log_ratio.samples, 5);
  EXPECT_DOUBLE_EQ(comparison->spearman, 1.0);  // Same ranks: a U against a deeper U.
}

// The ratio is taken per sample, then averaged: samples whose middles halve and double average
// to log 1 = 0 (the ratio of the mean middles would not), with standard error sd / sqrt(n).
TEST(PairedComparison, AveragesThePerSampleLogRatios) {
  const std::vector<std::vector<double>> birth = {Valley(1.0, 1.0), Valley(1.0, 1.0)};
  const std::vector<std::vector<double>> trained = {Valley(1.0, 0.25), Valley(1.0, 4.0)};
  auto comparison = CompareProfilesPaired(birth, trained);
  ASSERT_TRUE(comparison.ok());
  // Middle shares: birth 16/20; trained 4/8 and 64/68.
  const double a = std::log((4.0 / 8.0) / (16.0 / 20.0)), b = std::log((64.0 / 68.0) / (16.0 / 20.0));
  EXPECT_NEAR(comparison->middle_log_ratio.moments.mean, (a + b) / 2, 1e-12);
  EXPECT_NEAR(comparison->middle_log_ratio.moments.standard_error, std::abs(a - b) / 2, 1e-12);
  EXPECT_LE(comparison->middle_log_ratio.low, comparison->middle_log_ratio.moments.mean);
  EXPECT_GE(comparison->middle_log_ratio.high, comparison->middle_log_ratio.moments.mean);
  EXPECT_NEAR(comparison->middle_log_ratio.low, std::min(a, b), 1e-12);  // Two samples: a, b or their mean.
  EXPECT_NEAR(comparison->middle_log_ratio.high, std::max(a, b), 1e-12);
}

// A trained model first, its birth second, the birth named the reference: the trained model's
// ratio reads against its birth (the first model's, not the other way round).
TEST(CompareModels, PairsEveryModelWithTheNamedReference) {
  const std::vector<MeasuredModel> models = {{"trained", "", "", std::vector<std::vector<double>>(3, Valley(16.0, 1.0)), {}},
                                             {"init", "", "", std::vector<std::vector<double>>(3, Valley(4.0, 1.0)), {}}};
  ComparisonOptions options;
  options.reference = 1;
  auto compared = CompareModels(models, options);
  ASSERT_TRUE(compared.ok()) << compared.status();
  ASSERT_TRUE((*compared)[0].bands.middle_log_ratio.has_value());
  EXPECT_NEAR((*compared)[0].bands.middle_log_ratio->mean, std::log(0.4), 1e-12) << "trained against init";
  EXPECT_FALSE((*compared)[1].bands.middle_log_ratio.has_value()) << "the reference has no ratio";
  auto by_default = CompareModels(models);
  ASSERT_TRUE(by_default.ok());
  EXPECT_NEAR((*by_default)[1].bands.middle_log_ratio->mean, -std::log(0.4), 1e-12) << "init against trained, the first";
  options.reference = 2;
  EXPECT_EQ(CompareModels(models, options).status().code(), absl::StatusCode::kInvalidArgument);
}

// After training most of the weight may sit on the target's own position: over all positions the
// context's shape is then hidden behind it, over the context alone (1..T-1) it shows. L = 21: the
// context is Valley's 20 positions (bands 2, 16, 2), the target position 21 carries `target`.
TEST(CompareModels, TheContextAloneLeavesTheTargetsOwnPositionOut) {
  const auto with_target = [](double edge, double target) {
    std::vector<double> profile = Valley(edge, 1.0);
    profile.push_back(target);
    return std::vector<std::vector<double>>(3, profile);
  };
  // Birth: a valley of edges 4 and little on the target; trained: edges 16 and a target of 1000.
  const std::vector<MeasuredModel> models = {{"init", "", "", with_target(4.0, 1.0), {}},
                                             {"trained", "", "", with_target(16.0, 1000.0), {}}};
  auto compared = CompareModels(models);
  ASSERT_TRUE(compared.ok()) << compared.status();
  const ComparedModel& trained = (*compared)[1];
  ASSERT_TRUE(trained.context.has_value());
  // Over the context: 16 middle positions of 1 against 4 edges of 16 (total 80): middle 0.2, and
  // the reference's 16 / 32 = 0.5, so log(0.2 / 0.5) whatever the target holds.
  EXPECT_NEAR(trained.context->middle.mean, 16.0 / 80.0, 1e-12);
  EXPECT_NEAR(trained.context->middle_log_ratio->mean, std::log(0.4), 1e-12);
  EXPECT_NEAR(trained.context->last.mean, 16.0 / 80.0, 1e-12) << "w_{T-1} of the context's profile";
  // Over all 21 positions (bands of 2, 17, 2: the middle takes one edge of 16) the target's 1000
  // dominates a total of 1080.
  EXPECT_NEAR(trained.bands.last.mean, 1000.0 / 1080.0, 1e-12);
  EXPECT_NEAR(trained.bands.middle.mean, 32.0 / 1080.0, 1e-12);
  EXPECT_FALSE((*compared)[0].context->middle_log_ratio.has_value()) << "the reference has no ratio";
  // Below 4 positions there is no context of three bands.
  const std::vector<MeasuredModel> short_models = {{"a", "", "", {{1.0, 2.0, 3.0}}, {}}, {"b", "", "", {{1.0, 1.0, 1.0}}, {}}};
  auto short_compared = CompareModels(short_models);
  ASSERT_TRUE(short_compared.ok()) << short_compared.status();
  EXPECT_FALSE((*short_compared)[1].context.has_value());
}

TEST(PairedComparison, RefusesProfilesOfDifferentShapes) {
  const std::vector<std::vector<double>> three(3, Valley(1.0, 1.0));
  const std::vector<std::vector<double>> two(2, Valley(1.0, 1.0));
  EXPECT_EQ(CompareProfilesPaired(three, two).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CompareProfilesPaired({}, {}).status().code(), absl::StatusCode::kInvalidArgument);
  const std::vector<std::vector<double>> shorter(3, std::vector<double>(19, 1.0));
  EXPECT_EQ(CompareProfilesPaired(three, shorter).status().code(), absl::StatusCode::kInvalidArgument);
}

// The bootstrap interval of a mean covers it and is as reproducible as its seed.
TEST(BootstrapMean, IsReproducibleAndCoversTheMean) {
  const std::vector<double> values = {0.1, -0.3, 0.25, 0.4, -0.05, 0.2, 0.0, 0.15};
  ComparisonOptions options;
  options.seed = 7;
  const PairedEstimate first = BootstrapMean(values, options), again = BootstrapMean(values, options);
  EXPECT_EQ(first.low, again.low);
  EXPECT_EQ(first.high, again.high);
  EXPECT_LT(first.low, first.moments.mean);
  EXPECT_GT(first.high, first.moments.mean);
  // About mean -+ 1.96 standard errors for a mean of 8 values (within a third of it).
  EXPECT_NEAR(first.high - first.low, 2 * 1.96 * first.moments.standard_error, 0.7 * first.moments.standard_error);
}

}  // namespace
}  // namespace posbias::statistics
