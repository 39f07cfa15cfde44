#include "server/density/discrete.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "gtest/gtest.h"
#include "server/density/continuum.h"
#include "server/density/mixing.h"
#include "server/density/routing.h"
#include "tests/density/golden_table.h"

namespace posbias::density {
namespace {

using posbias::testing::GoldenRow;
using posbias::testing::IsNormalDouble;
using posbias::testing::ReadGoldenTable;
using posbias::testing::RelativeError;

constexpr double kGoldenRelativeBound = 1e-12;

// Largest error over a table, with the row where it happened.
struct Worst {
  double error = 0.0;
  std::string where;
  int checked = 0;
  void Record(double value, const std::string& row) {
    ++checked;
    if (value > error) error = value, where = row;
  }
};

// Relative error where the exact value is a normal double; where it is exactly 0 (alpha = 0 puts no
// weight before the last token) the computed value must not be a normal double either.
void CheckEntry(double actual, double expected, Worst& worst, const std::string& where) {
  if (IsNormalDouble(expected)) {
    worst.Record(RelativeError(actual, expected), where);
  } else if (expected == 0.0) {
    worst.Record(std::abs(actual) < DBL_MIN ? 0.0 : 1.0, where);
  }
}

DiscreteProfiles Compute(const Routing& routing, uint64_t length,
                         const DiscreteOptions& options = {}) {
  auto profiles = ComputeDiscreteProfiles(routing, length, options);
  EXPECT_TRUE(profiles.ok()) << profiles.status();
  return profiles.ok() ? *std::move(profiles) : DiscreteProfiles{};
}

DiscreteProfiles Compute(uint32_t depth, double alpha, uint64_t length) {
  const auto routing = MakeRouting(depth, alpha);
  EXPECT_TRUE(routing.ok()) << routing.status();
  return Compute(*routing, length);
}

double Sum(const std::vector<double>& values) {
  double sum = 0.0;
  for (double value : values) sum += value;
  return sum;
}

TEST(DiscreteGolden, ConstantAlphaMatchesExactRationalsForSmallLengths) {
  const auto rows = ReadGoldenTable("discrete.csv");
  ASSERT_EQ(rows.size(), 1700u);
  std::map<std::tuple<uint32_t, double, uint64_t>, DiscreteProfiles> cache;
  Worst coherent, incoherent;
  for (const GoldenRow& row : rows) {
    const auto depth = static_cast<uint32_t>(row.Number("H"));
    const double alpha = row.Number("alpha");
    const auto length = static_cast<uint64_t>(row.Number("L"));
    const auto j = static_cast<uint64_t>(row.Number("j"));
    const auto key = std::make_tuple(depth, alpha, length);
    if (!cache.contains(key)) cache[key] = Compute(depth, alpha, length);
    const DiscreteProfiles& profiles = cache[key];
    ASSERT_EQ(profiles.coherent.size(), length);
    ASSERT_EQ(profiles.incoherent.size(), length);
    ASSERT_GE(j, 1u);
    ASSERT_LE(j, length);
    const std::string where = "H=" + row.field.at("H") + " alpha=" + row.field.at("alpha") +
                              " L=" + row.field.at("L") + " j=" + row.field.at("j");
    CheckEntry(profiles.coherent[j - 1], row.Number("coherent"), coherent, where);
    CheckEntry(profiles.incoherent[j - 1], row.Number("incoherent"), incoherent, where);
  }
  EXPECT_LE(coherent.error, kGoldenRelativeBound) << "coherent at " << coherent.where;
  EXPECT_LE(incoherent.error, kGoldenRelativeBound) << "incoherent at " << incoherent.where;
  EXPECT_GT(coherent.checked, 1000);
  std::printf("discrete.csv: %d entries, coherent %.2e, incoherent %.2e\n", coherent.checked,
              coherent.error, incoherent.error);
}

TEST(DiscreteGolden, PerLayerSchedulesMatchExactRationals) {
  const auto rows = ReadGoldenTable("discrete_schedule.csv");
  ASSERT_EQ(rows.size(), 66u);
  std::map<std::pair<std::string, uint64_t>, DiscreteProfiles> cache;
  Worst coherent, incoherent;
  for (const GoldenRow& row : rows) {
    const auto length = static_cast<uint64_t>(row.Number("L"));
    const auto j = static_cast<uint64_t>(row.Number("j"));
    const auto key = std::make_pair(row.field.at("schedule"), length);
    if (!cache.contains(key)) {
      const auto routing = MakeScheduledRouting(0, row.Numbers("schedule"));
      ASSERT_TRUE(routing.ok()) << routing.status();
      cache[key] = Compute(*routing, length);
    }
    const DiscreteProfiles& profiles = cache[key];
    ASSERT_EQ(profiles.coherent.size(), length);
    const std::string where =
        "schedule=" + row.field.at("schedule") + " L=" + row.field.at("L") + " j=" + row.field.at("j");
    CheckEntry(profiles.coherent[j - 1], row.Number("coherent"), coherent, where);
    CheckEntry(profiles.incoherent[j - 1], row.Number("incoherent"), incoherent, where);
  }
  EXPECT_LE(coherent.error, kGoldenRelativeBound) << "coherent at " << coherent.where;
  EXPECT_LE(incoherent.error, kGoldenRelativeBound) << "incoherent at " << incoherent.where;
  std::printf("discrete_schedule.csv: %d entries, coherent %.2e, incoherent %.2e\n",
              coherent.checked, coherent.error, incoherent.error);
}

TEST(DiscreteProfile, CoherentRowSumsToOneUpToAHundredThousandPositions) {
  for (const auto& [depth, alpha, length] :
       std::vector<std::tuple<uint32_t, double, uint64_t>>{{1, 0.5, 1},
                                                           {1, 1.0, 7},
                                                           {3, 0.0, 10},
                                                           {12, 0.3, 256},
                                                           {24, 0.5, 1000},
                                                           {24, 1.0, 4096},
                                                           {96, 0.9, 5000},
                                                           {24, 0.5, 100000},
                                                           {6, 0.1, 100000}}) {
    const DiscreteProfiles profiles = Compute(depth, alpha, length);
    ASSERT_EQ(profiles.length, length);
    ASSERT_EQ(profiles.coherent.size(), length);
    EXPECT_NEAR(Sum(profiles.coherent), 1.0, 1e-12)
        << "H=" << depth << " alpha=" << alpha << " L=" << length;
  }
}

TEST(DiscreteProfile, ScheduledCoherentRowSumsToOne) {
  const auto routing = MakeScheduledRouting(0, {0.1, 0.9, 0.0, 1.0, 0.5, 0.33});
  ASSERT_TRUE(routing.ok()) << routing.status();
  EXPECT_NEAR(Sum(Compute(*routing, 3000).coherent), 1.0, 1e-12);
}

TEST(DiscreteProfile, LastEntryIsTheResidualPowerOfTheLastToken) {
  // THEORY.md section 2: (M^r)_{LL} = L^-r, so v_L = (1 - alpha + alpha / L)^H.
  for (const auto& [depth, alpha, length] :
       std::vector<std::tuple<uint32_t, double, uint64_t>>{
           {1, 0.25, 2}, {7, 0.9, 33}, {24, 0.5, 1024}, {24, 1.0, 16}, {100, 0.05, 777}}) {
    const DiscreteProfiles profiles = Compute(depth, alpha, length);
    const double expected =
        std::pow(1.0 - alpha + alpha / static_cast<double>(length), static_cast<double>(depth));
    EXPECT_LE(RelativeError(profiles.coherent.back(), expected), 1e-13)
        << "H=" << depth << " alpha=" << alpha << " L=" << length;
  }
}

TEST(DiscreteProfile, ScaledSecondToLastEntryApproachesTheContinuumFloor) {
  // THEORY.md section 2: L v_{L-1} -> H alpha (1 - alpha)^(H - 1); the gap is O(H / L).
  for (const auto& [depth, alpha] :
       std::vector<std::pair<uint32_t, double>>{{24, 0.5}, {12, 0.3}, {6, 0.9}, {1, 0.7}}) {
    const uint64_t length = 100000;
    const DiscreteProfiles profiles = Compute(depth, alpha, length);
    const double floor = depth * alpha * std::pow(1.0 - alpha, depth - 1.0);
    const double scaled = static_cast<double>(length) * profiles.coherent[length - 2];
    EXPECT_LE(RelativeError(scaled, floor), 1e-3) << "H=" << depth << " alpha=" << alpha;
    // And the gap closes as L grows (H = 1 is exact at every length).
    if (depth > 1) {
      const DiscreteProfiles shorter = Compute(depth, alpha, 1000);
      const double scaled_shorter = 1000.0 * shorter.coherent[1000 - 2];
      EXPECT_LT(RelativeError(scaled, floor), RelativeError(scaled_shorter, floor));
    }
  }
}

TEST(DiscreteProfile, MinimumIsAtTheSecondToLastPositionWhenAlphaIsBelowOne) {
  for (const auto& [depth, alpha, length] :
       std::vector<std::tuple<uint32_t, double, uint64_t>>{{2, 0.5, 3},
                                                           {3, 0.9, 50},
                                                           {12, 0.3, 256},
                                                           {24, 0.5, 16384},
                                                           {24, 0.99, 16384},
                                                           {200, 0.01, 1000}}) {
    const std::vector<double> v = Compute(depth, alpha, length).coherent;
    const size_t second_to_last = length - 2;
    for (size_t j = 0; j < length; ++j) {
      if (j == second_to_last) continue;
      ASSERT_LT(v[second_to_last], v[j])
          << "H=" << depth << " alpha=" << alpha << " L=" << length << " j=" << j + 1;
    }
  }
}

TEST(DiscreteProfile, LastTokenIsTheMinimumWhenAlphaIsNearOneAndTheContextIsShort) {
  // The section 2 statement needs the residual spike to survive: (1 - alpha + alpha / L)^H must
  // exceed v_{L-1} ~ H alpha (1 - alpha)^(H - 1) / L. At alpha = 0.999, L = 100 it does not, and
  // as for the pure causal model (alpha = 1) the last token is the smallest entry.
  for (const double alpha : {0.999, 1.0}) {
    const std::vector<double> v = Compute(24, alpha, 100).coherent;
    EXPECT_EQ(std::min_element(v.begin(), v.end()) - v.begin(), 99) << "alpha=" << alpha;
  }
}

TEST(DiscreteProfile, IncoherentProfileIsTheSquaredRowSumOfCesaroPowers) {
  const std::vector<double> schedule = {0.2, 0.0, 0.7, 1.0, 0.45, 0.9, 0.1};
  std::vector<Routing> routings = {*MakeRouting(9, 0.35), *MakeRouting(4, 1.0),
                                   *MakeScheduledRouting(0, schedule)};
  for (const Routing& routing : routings) {
    const uint64_t length = 300;
    const auto rows = CesaroRowPowers(length, routing.depth());
    ASSERT_EQ(rows.size(), routing.depth() + 1u);
    const MixingCoefficients c_tilde = IncoherentCoefficients(routing);
    const MixingCoefficients c = CoherentCoefficients(routing);
    const DiscreteProfiles profiles = Compute(routing, length);
    for (uint64_t j = 0; j < length; ++j) {
      double incoherent = 0.0, coherent = 0.0;
      for (uint32_t r = 0; r <= routing.depth(); ++r) {
        incoherent += c_tilde.c(r) * rows[r][j] * rows[r][j];
        coherent += c.c(r) * rows[r][j];
      }
      ASSERT_LE(RelativeError(profiles.incoherent[j], incoherent), 1e-13)
          << "depth " << routing.depth() << " j=" << j + 1;
      ASSERT_LE(RelativeError(profiles.coherent[j], coherent), 1e-13)
          << "depth " << routing.depth() << " j=" << j + 1;
    }
  }
}

TEST(CesaroRowPowers, RowsAreSuffixSumsStartingFromTheLastToken) {
  const auto rows = CesaroRowPowers(5, 2);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0], (std::vector<double>{0, 0, 0, 0, 1}));
  for (double value : rows[1]) EXPECT_DOUBLE_EQ(value, 0.2);  // Uniform over the prefix.
  // u^(2)_j = sum_{i >= j} 0.2 / i.
  double suffix = 0.0;
  for (int j = 5; j >= 1; --j) {
    suffix += 0.2 / j;
    EXPECT_DOUBLE_EQ(rows[2][static_cast<size_t>(j - 1)], suffix) << "j=" << j;
  }
  EXPECT_DOUBLE_EQ(rows[2][4], 1.0 / 25.0);  // (M^r)_{LL} = L^-r.
}

TEST(DiscreteProfile, CancellationCallbackReturningFalseYieldsCancelled) {
  const Routing routing = *MakeRouting(24, 0.5);
  int calls = 0;
  DiscreteOptions options;
  options.check_every_positions = 100;
  options.keep_going = [&calls] { return ++calls < 3; };
  const auto profiles = ComputeDiscreteProfiles(routing, 1000, options);
  EXPECT_EQ(profiles.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 3);
}

TEST(DiscreteProfile, CancellationCallbackReturningTrueIsPolledAndChangesNothing) {
  const Routing routing = *MakeRouting(24, 0.5);
  int calls = 0;
  DiscreteOptions options;
  options.check_every_positions = 1000;
  options.keep_going = [&calls] { return ++calls > 0; };
  const auto profiles = ComputeDiscreteProfiles(routing, 10000, options);
  ASSERT_TRUE(profiles.ok()) << profiles.status();
  EXPECT_EQ(calls, 10);  // At j = 10000, 9000, ..., 1000.
  const DiscreteProfiles plain = Compute(routing, 10000);
  EXPECT_EQ(profiles->coherent, plain.coherent);
  EXPECT_EQ(profiles->incoherent, plain.incoherent);
}

TEST(DiscreteProfile, UnrequestedProfilesAreLeftEmpty) {
  const Routing routing = *MakeRouting(12, 0.3);
  const DiscreteProfiles both = Compute(routing, 200);
  DiscreteOptions options;
  options.coherent = false;
  const DiscreteProfiles incoherent_only = Compute(routing, 200, options);
  EXPECT_EQ(incoherent_only.length, 200u);
  EXPECT_TRUE(incoherent_only.coherent.empty());
  EXPECT_EQ(incoherent_only.incoherent, both.incoherent);
  options.coherent = true;
  options.incoherent = false;
  const DiscreteProfiles coherent_only = Compute(routing, 200, options);
  EXPECT_TRUE(coherent_only.incoherent.empty());
  EXPECT_EQ(coherent_only.coherent, both.coherent);
}

TEST(DiscreteProfile, ScaledEntriesApproachTheContinuumDensityAtMidpoints) {
  // THEORY.md section 4: at alpha = 1/2, H = 24 the relative error of L v_j against rho^N on
  // x in [0.05, 0.95] is O(H / L): 4e-3 at L = 16384 at x = j / L, better at x = (j - 1/2) / L.
  const Routing routing = *MakeRouting(24, 0.5);
  const ContinuumProfile continuum(routing);
  const auto max_error = [&](uint64_t length, double offset = 0.5) {
    const std::vector<double> v = Compute(routing, length).coherent;
    double worst = 0.0;
    const double l = static_cast<double>(length);
    for (uint64_t j = 1; j <= length; ++j) {
      const double x = (static_cast<double>(j) - offset) / l;
      if (x < 0.05 || x > 0.95) continue;
      worst = std::max(worst, RelativeError(l * v[j - 1], continuum.Density(x)));
    }
    return worst;
  };
  const double at_16384 = max_error(16384);
  const double at_1024 = max_error(1024);
  const double at_16384_right_ends = max_error(16384, 0.0);
  std::printf("max relative error at midpoints: L=1024 %.2e, L=16384 %.2e (at j/L: %.2e)\n",
              at_1024, at_16384, at_16384_right_ends);
  // Observed 2.5e-3 (3.8e-3 at x = j / L); a wrong scale or shifted x is off by far more.
  EXPECT_LE(at_16384, 5e-3);
  // O(H / L): sixteen times the length cuts the error by roughly sixteen.
  EXPECT_GT(at_1024 / at_16384, 8.0);
}

}  // namespace
}  // namespace posbias::density
