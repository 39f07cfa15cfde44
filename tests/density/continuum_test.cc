#include "server/density/continuum.h"

#include <cfloat>
#include <cmath>
#include <string>

#include "gtest/gtest.h"
#include "server/density/routing.h"
#include "server/status/error.h"
#include "tests/density/golden_table.h"

namespace posbias::density {
namespace {

using posbias::testing::GoldenRow;
using posbias::testing::IsNormalDouble;
using posbias::testing::ReadGoldenTable;
using posbias::testing::RelativeError;

constexpr double kRelativeBound = 1e-12;
constexpr double kLogAbsoluteBound = 1e-10;

// Worst errors over a table, reported per quantity so a failure names the regime.
struct Worst {
  double relative = 0.0;
  std::string where;
  void Record(double error, const std::string& row) {
    if (error > relative) relative = error, where = row;
  }
};

struct TableErrors {
  Worst density, log_density, cdf, ccdf, atom;
  int rows = 0;
};

std::string Describe(const GoldenRow& row, const std::string& model_key) {
  return row.field.at(model_key) + " x=" + row.field.at("x");
}

void CheckRelative(double actual, double expected, Worst& worst, const std::string& where) {
  if (IsNormalDouble(expected)) {
    worst.Record(RelativeError(actual, expected), where);
  } else if (expected == 0.0 || std::abs(expected) < DBL_MIN) {
    worst.Record(std::abs(actual) < DBL_MIN ? 0.0 : 1.0, where);  // Must not be a normal value.
  }
}

void CheckRow(const ContinuumProfile& profile, const GoldenRow& row, const std::string& where,
              TableErrors& errors) {
  const double x = row.Number("x");
  CheckRelative(profile.Density(x), row.Number("density"), errors.density, where);
  const double expected_log = row.Number("log_density");
  const double actual_log = static_cast<double>(profile.LogDensity(x));
  if (std::isinf(expected_log)) {
    errors.log_density.Record(actual_log == expected_log ? 0.0 : 1.0, where);
  } else {
    errors.log_density.Record(std::abs(actual_log - expected_log), where);
  }
  CheckRelative(profile.Cdf(x), row.Number("cdf"), errors.cdf, where);
  CheckRelative(profile.Ccdf(x), row.Number("ccdf"), errors.ccdf, where);
  CheckRelative(profile.atom(), row.Number("atom"), errors.atom, where);
  ++errors.rows;
}

void ExpectWithinBounds(const TableErrors& errors) {
  EXPECT_LE(errors.density.relative, kRelativeBound) << "density at " << errors.density.where;
  EXPECT_LE(errors.log_density.relative, kLogAbsoluteBound) << "log at " << errors.log_density.where;
  EXPECT_LE(errors.cdf.relative, kRelativeBound) << "cdf at " << errors.cdf.where;
  EXPECT_LE(errors.ccdf.relative, kRelativeBound) << "ccdf at " << errors.ccdf.where;
  EXPECT_LE(errors.atom.relative, kRelativeBound) << "atom at " << errors.atom.where;
  std::printf("rows %d: density %.2e, log-density %.2e (abs), cdf %.2e, ccdf %.2e\n", errors.rows,
              errors.density.relative, errors.log_density.relative, errors.cdf.relative,
              errors.ccdf.relative);
}

TEST(ContinuumGolden, ConstantAlphaMatchesFiftyDigitValuesEverywhere) {
  const auto rows = ReadGoldenTable("continuum.csv");
  ASSERT_EQ(rows.size(), 882u);
  TableErrors errors;
  for (const auto& row : rows) {
    const auto routing = MakeRouting(static_cast<uint32_t>(row.Number("H")), row.Number("alpha"));
    ASSERT_TRUE(routing.ok()) << routing.status();
    CheckRow(ContinuumProfile(*routing), row,
             "H=" + row.field.at("H") + " alpha=" + Describe(row, "alpha"), errors);
  }
  ExpectWithinBounds(errors);
}

TEST(ContinuumGolden, PerLayerSchedulesMatchFiftyDigitValues) {
  const auto rows = ReadGoldenTable("continuum_schedule.csv");
  ASSERT_EQ(rows.size(), 84u);
  TableErrors errors;
  for (const auto& row : rows) {
    const auto routing = MakeScheduledRouting(0, row.Numbers("schedule"));
    ASSERT_TRUE(routing.ok()) << routing.status();
    CheckRow(ContinuumProfile(*routing), row, Describe(row, "schedule"), errors);
  }
  ExpectWithinBounds(errors);
}

TEST(ContinuumProfile, PureCausalModelWithOneLayerIsUniform) {
  const ContinuumProfile profile(*MakeRouting(1, 1.0));
  EXPECT_DOUBLE_EQ(profile.Density(0.3), 1.0);
  EXPECT_DOUBLE_EQ(profile.Cdf(0.3), 0.3);
  EXPECT_DOUBLE_EQ(profile.atom(), 0.0);
}

TEST(ContinuumProfile, MiddleOfTwentyFourHalfWeightLayersIsAboutEMinusNine) {
  // THEORY.md section 3: alpha = 1/2, H = 24 gives ln rho^N(1/2) = -9.06, not -51.6.
  const ContinuumProfile profile(*MakeRouting(24, 0.5));
  EXPECT_NEAR(static_cast<double>(profile.LogDensity(0.5)), -9.06, 0.005);
}

TEST(ContinuumProfile, FloorIsTheLimitOfTheDensityAtOne) {
  const ContinuumProfile profile(*MakeRouting(12, 0.3));
  EXPECT_NEAR(profile.floor(), 12 * 0.3 * std::pow(0.7, 11), 1e-15);
  EXPECT_NEAR(profile.Density(1.0 - 1e-12), profile.floor(), 1e-9);
}

TEST(ContinuumProfile, LogDensityStaysFiniteWhereTheDensityUnderflows) {
  const ContinuumProfile profile(*MakeRouting(1000, 1e-300));
  const long double log_density = profile.LogDensity(0.5);
  EXPECT_TRUE(std::isfinite(static_cast<double>(log_density)));
  EXPECT_LT(log_density, -680.0L);
}

TEST(CheckPoint, RejectsPointsOutsideTheUnitIntervalNamingTheField) {
  for (double x : {0.0, -1.0, 1.0000000000000002, std::nan("")}) {
    const absl::Status status = CheckPoint(x, "points[2]");
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ErrorReasonOf(status), "INVALID_POINT");
    EXPECT_NE(status.message().find("points[2]"), std::string::npos);
    EXPECT_NE(status.message().find("(0, 1]"), std::string::npos);
  }
  EXPECT_TRUE(CheckPoint(DBL_TRUE_MIN, "x").ok());
  EXPECT_TRUE(CheckPoint(1.0, "x").ok());
}

}  // namespace
}  // namespace posbias::density
