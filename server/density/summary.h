// Level-based summaries of a per-position profile (THEORY.md section 7): first and last weights,
// the floor and where it is, mass in leading / middle / trailing bands, influence quantiles.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/density/continuum.h"

namespace posbias::density {

struct SummaryOptions {
  // Bands as fractions of L (leading = j <= ceil(leading * L), trailing = j > L - ceil(trailing*L)),
  // or, when use_positions, as positions (leading = 1..leading_end, trailing = trailing_start..L).
  double leading_fraction = 0.1;
  double trailing_fraction = 0.1;
  bool use_positions = false;
  uint64_t leading_end = 0;
  uint64_t trailing_start = 0;
  std::vector<double> quantile_levels = {0.5, 0.9, 0.99};
};

inline constexpr size_t kMaxQuantileLevels = 32;

struct QuantilePoint {
  double level = 0.0;
  uint64_t position = 0;  // Discrete only.
  double x = 0.0;
};

struct ProfileSummary {
  uint64_t length = 0;  // 0 for the continuum.
  double total = 0.0;
  double first_weight = 0.0;
  double last_weight = 0.0;
  double floor_value = 0.0;
  uint64_t floor_position = 0;
  double floor_x = 0.0;
  double leading_mass = 0.0;
  double middle_mass = 0.0;
  double trailing_mass = 0.0;
  std::vector<QuantilePoint> quantiles;
  double last_token_jump = 0.0;
};

// Checks band and quantile options against a length (0 = continuum, where positions are refused).
absl::Status CheckSummaryOptions(const SummaryOptions& options, uint64_t length);

// INVALID_PROFILE unless every value is finite and >= 0 and at least one is positive.
absl::Status CheckProfileValues(std::span<const double> values, const std::string& field);

// Summary of values p_1..p_L (not necessarily normalized). Options must be checked.
ProfileSummary SummarizeValues(std::span<const double> values, const SummaryOptions& options);

// Summary of the continuum law: atom as last weight, floor c_1 at x = 1, masses from the CDF,
// quantiles by bisection of the CDF.
ProfileSummary SummarizeContinuum(const ContinuumProfile& profile, const SummaryOptions& options);

}  // namespace posbias::density
