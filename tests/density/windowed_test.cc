// Sliding-window attention in the routing model: the exact rows against rational arithmetic with
// dense matrices (golden/generate_windowed.py), and the facts THEORY.md section 9 states.
#include "server/density/windowed.h"

#include <cfloat>
#include <cmath>
#include <cstdio>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/density/discrete.h"
#include "server/density/fit.h"
#include "server/density/routing.h"
#include "server/status/error.h"
#include "tests/density/golden_table.h"

namespace posbias::density {
namespace {

using posbias::testing::GoldenRow;
using posbias::testing::IsNormalDouble;
using posbias::testing::ReadGoldenTable;
using posbias::testing::RelativeError;

constexpr double kBound = 1e-12;

Routing Windowed(std::vector<double> alphas, std::vector<uint32_t> windows) {
  auto routing = MakeScheduledRouting(0, alphas);
  EXPECT_TRUE(routing.ok()) << routing.status();
  auto windowed = WithAttentionWindows(*routing, 0, windows);
  EXPECT_TRUE(windowed.ok()) << windowed.status();
  return *windowed;
}

std::vector<uint32_t> Windows(const GoldenRow& row) {
  std::vector<uint32_t> out;
  for (double w : row.Numbers("windows")) out.push_back(static_cast<uint32_t>(w));
  return out;
}

TEST(WindowedGolden, CoherentAndIncoherentRowsMatchExactRationals) {
  const auto rows = ReadGoldenTable("windowed.csv");
  ASSERT_EQ(rows.size(), 1254u);
  std::map<std::string, DiscreteProfiles> cache;
  double worst_coherent = 0, worst_incoherent = 0;
  int checked = 0;
  for (const GoldenRow& row : rows) {
    const auto length = static_cast<uint64_t>(row.Number("L"));
    const auto j = static_cast<uint64_t>(row.Number("j"));
    const bool has_incoherent = !row.field.at("incoherent").empty();
    const std::string key = row.field.at("alphas") + "|" + row.field.at("windows") + "|" + row.field.at("L");
    if (!cache.contains(key)) {
      DiscreteOptions options;
      options.incoherent = has_incoherent;
      auto profiles = ComputeDiscreteProfiles(Windowed(row.Numbers("alphas"), Windows(row)), length, options);
      ASSERT_TRUE(profiles.ok()) << key << ": " << profiles.status();
      cache[key] = *std::move(profiles);
    }
    const DiscreteProfiles& profiles = cache[key];
    const std::string where = key + " j=" + row.field.at("j");
    auto check = [&](double actual, double expected, double& worst) {
      if (IsNormalDouble(expected)) {
        worst = std::max(worst, RelativeError(actual, expected));
      } else if (expected == 0.0) {
        EXPECT_EQ(actual, 0.0) << where << ": beyond the window's reach the row is exactly 0";
      }
    };
    check(profiles.coherent[j - 1], row.Number("coherent"), worst_coherent);
    if (has_incoherent) check(profiles.incoherent[j - 1], row.Number("incoherent"), worst_incoherent);
    ++checked;
  }
  EXPECT_LE(worst_coherent, kBound);
  EXPECT_LE(worst_incoherent, kBound);
  std::printf("windowed.csv: %d entries, coherent %.2e, incoherent %.2e\n", checked, worst_coherent, worst_incoherent);
}

TEST(Windowed, AWindowOfLOrMoreIsFullCausalAttention) {
  const auto full = ComputeDiscreteProfiles(*MakeRouting(12, 0.5), 300);
  for (uint32_t w : {300u, 301u, 100000u}) {
    const auto windowed = ComputeDiscreteProfiles(*WithAttentionWindows(*MakeRouting(12, 0.5), w, {}), 300);
    ASSERT_TRUE(windowed.ok()) << windowed.status();
    for (uint64_t j = 0; j < 300; ++j) {
      EXPECT_NEAR(windowed->coherent[j], full->coherent[j], 1e-13 * full->coherent[j] + 1e-300) << w << " " << j;
      EXPECT_NEAR(windowed->incoherent[j], full->incoherent[j], 1e-13 * full->incoherent[j] + 1e-300) << w << " " << j;
    }
  }
}

TEST(Windowed, InfluenceReachesBackAtMostHTimesWMinusOnePositionsAndTheRowSumsToOne) {
  const uint64_t length = 2000;
  const uint32_t depth = 6, window = 50;
  const auto profiles = ComputeDiscreteProfiles(*WithAttentionWindows(*MakeRouting(depth, 0.5), window, {}), length);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  const uint64_t reach = uint64_t{depth} * (window - 1);
  for (uint64_t j = 1; j <= length; ++j) {
    if (j < length - reach) {
      EXPECT_EQ(profiles->coherent[j - 1], 0.0) << j;
    }
  }
  EXPECT_GT(profiles->coherent[length - reach - 1], 0.0);
  // Each N_l is row-stochastic, so the row sums to 1: the primacy tail is gone, not rescaled.
  EXPECT_NEAR(std::accumulate(profiles->coherent.begin(), profiles->coherent.end(), 0.0), 1.0, 1e-12);
}

// Far from position 1 a window is a convolution and convolutions commute; near the start the
// windows are cut short (row i averages min(i, w) positions) and the order shows.
TEST(Windowed, TheLayersOrderMattersWhenTheirWindowsDifferAndReachTheStart) {
  DiscreteOptions coherent_only;
  coherent_only.incoherent = false;
  const auto forward = ComputeDiscreteProfiles(Windowed({0.25, 0.5, 0.75}, {2, 5, 3}), 9, coherent_only);
  const auto backward = ComputeDiscreteProfiles(Windowed({0.25, 0.5, 0.75}, {3, 5, 2}), 9, coherent_only);
  ASSERT_TRUE(forward.ok() && backward.ok());
  EXPECT_GT(std::abs(forward->coherent[2] - backward->coherent[2]), 1e-2);  // j = 3 (golden: 2.81e-2 vs 1.15e-2).
  const auto far_forward = ComputeDiscreteProfiles(Windowed({0.5, 0.5}, {2, 7}), 200, coherent_only);
  const auto far_backward = ComputeDiscreteProfiles(Windowed({0.5, 0.5}, {7, 2}), 200, coherent_only);
  for (uint64_t j = 0; j < 200; ++j) EXPECT_NEAR(far_forward->coherent[j], far_backward->coherent[j], 1e-15) << j;
}

TEST(Windowed, TheIncoherentProfileWithDifferentWindowsIsUnimplementedAndBadSchedulesAreRefused) {
  const auto mixed = ComputeDiscreteProfiles(Windowed({0.5, 0.5}, {2, 7}), 20);
  EXPECT_EQ(mixed.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_EQ(ErrorReasonOf(mixed.status()), "NOT_IMPLEMENTED");
  const auto both = WithAttentionWindows(*MakeRouting(2, 0.5), 4, {2, 3});
  EXPECT_EQ(both.status().code(), absl::StatusCode::kInvalidArgument);
  const auto short_list = WithAttentionWindows(*MakeRouting(3, 0.5), 0, {2, 3});
  EXPECT_EQ(ErrorFieldOf(short_list.status()), "layer_windows");
  // All zeros is full causal attention.
  EXPECT_FALSE(WithAttentionWindows(*MakeRouting(2, 0.5), 0, {0, 0})->windowed());
}

TEST(Windowed, AFitRecoversAlphaFromAWindowedProfile) {
  const uint64_t length = 256;  // Within the window's reach H * (w - 1) = 504: no exact zeros.
  const auto profiles = ComputeDiscreteProfiles(*WithAttentionWindows(*MakeRouting(8, 0.35), 64, {}), length);
  ASSERT_TRUE(profiles.ok());
  FitOptions options;
  options.models = {Model::kCoherent};
  options.quantity = Quantity::kWeight;
  options.min_depth = options.max_depth = 8;
  options.attention_window = 64;
  const auto fits = FitProfile(profiles->coherent, options);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_NEAR(fits->front().alpha, 0.35, 1e-4);
  // The same profile fitted as if attention were full causal lands elsewhere.
  options.attention_window = 0;
  const auto full = FitProfile(profiles->coherent, options);
  ASSERT_TRUE(full.ok()) << full.status();
  EXPECT_GT(std::abs(full->front().alpha - 0.35), 1e-2);
}

// A model whose layers alternate a window of 48 and full attention (Gemma 2's pattern): the fit
// runs the layers' product for every trial alpha and recovers alpha; the incoherent model, a sum
// over the 2^H subsets of layers, is refused by name.
TEST(Windowed, AFitRecoversAlphaFromAPatternOfWindowsThatDifferBetweenLayers) {
  const uint64_t length = 200;
  const std::vector<uint32_t> pattern = {48, 0};
  DiscreteOptions coherent_only;
  coherent_only.incoherent = false;
  const auto profiles = ComputeDiscreteProfiles(*WithAttentionWindows(*MakeRouting(6, 0.4), 0, {48, 0, 48, 0, 48, 0}),
                                                length, coherent_only);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  FitOptions options;
  options.models = {Model::kCoherent};
  options.quantity = Quantity::kWeight;
  options.min_depth = options.max_depth = 6;
  options.layer_windows = pattern;
  const auto fits = FitProfile(profiles->coherent, options);
  ASSERT_TRUE(fits.ok()) << fits.status();
  EXPECT_NEAR(fits->front().alpha, 0.4, 1e-4);
  EXPECT_LT(fits->front().metrics.rmse_log, 1e-6);
  // The same profile fitted with one window for every layer lands elsewhere.
  options.layer_windows = {48};
  EXPECT_GT(std::abs(FitProfile(profiles->coherent, options)->front().alpha - 0.4), 1e-3);
  options.layer_windows = pattern;
  options.models = {Model::kCoherent, Model::kIncoherent};
  EXPECT_EQ(ErrorFieldOf(FitProfile(profiles->coherent, options).status()), "models");
  options.models = {Model::kCoherent};
  options.attention_window = 48;
  EXPECT_EQ(ErrorFieldOf(FitProfile(profiles->coherent, options).status()), "attention_window");
}

}  // namespace
}  // namespace posbias::density
