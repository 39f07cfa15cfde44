#include "server/density/summary.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::density {
namespace {

struct Bands {
  uint64_t leading_end = 0;     // Leading band: 1..leading_end.
  uint64_t trailing_start = 0;  // Trailing band: trailing_start..L.
};

Bands ResolveBands(const SummaryOptions& options, uint64_t length) {
  if (options.use_positions) return {options.leading_end, options.trailing_start};
  // ceil(fraction * L), forgiving the rounding of the product (0.07 * 100 = 7.000000000000001).
  const auto count = [&](double fraction) {
    const double positions = fraction * static_cast<double>(length);
    return static_cast<uint64_t>(std::ceil(positions - positions * 1e-12));
  };
  Bands bands{std::min(count(options.leading_fraction), length), 0};
  const uint64_t trailing = std::min(count(options.trailing_fraction), length);
  bands.trailing_start = std::max(length - trailing + 1, bands.leading_end + 1);
  return bands;
}

bool InUnitInterval(double value) { return value >= 0.0 && value <= 1.0; }

absl::Status CheckFractions(const SummaryOptions& options) {
  if (!InUnitInterval(options.leading_fraction)) {
    return InvalidArgumentError({ErrorReason::kInvalidBands, "band_fractions.leading",
                                 FormatValue(options.leading_fraction), "[0, 1]"});
  }
  if (!InUnitInterval(options.trailing_fraction) ||
      options.leading_fraction + options.trailing_fraction > 1.0) {
    return InvalidArgumentError({ErrorReason::kInvalidBands, "band_fractions.trailing",
                                 FormatValue(options.trailing_fraction),
                                 "[0, 1 - band_fractions.leading]"});
  }
  return absl::OkStatus();
}

absl::Status CheckPositions(const SummaryOptions& options, uint64_t length) {
  if (length == 0) {
    return InvalidArgumentError({ErrorReason::kInvalidBands, "band_positions", "given",
                                 "band_fractions only for the continuum"});
  }
  if (options.leading_end >= options.trailing_start || options.trailing_start > length + 1) {
    return InvalidArgumentError(
        {ErrorReason::kInvalidBands, "band_positions",
         absl::StrCat("leading_end ", options.leading_end, ", trailing_start ",
                      options.trailing_start),
         absl::StrCat("0 <= leading_end < trailing_start <= L + 1 = ", length + 1)});
  }
  return absl::OkStatus();
}

// Smallest x with CDF(x) >= q, by bisection on t = ln(1/x) in [0, 745.2] (CDF decreases in t).
double ContinuumQuantile(const ContinuumProfile& profile, double level) {
  if (level > 1.0 - profile.atom()) return 1.0;  // Reached only by the atom at x = 1.
  double t_low = 0.0, t_high = 745.2;            // CDF(e^-t_low) >= level > CDF(e^-t_high).
  for (int iteration = 0; iteration < 200 && t_high - t_low > 1e-15 * t_high; ++iteration) {
    const double t_mid = 0.5 * (t_low + t_high);
    if (profile.Cdf(std::exp(-t_mid)) >= level) {
      t_low = t_mid;
    } else {
      t_high = t_mid;
    }
  }
  return std::exp(-t_low);
}

}  // namespace

absl::Status CheckSummaryOptions(const SummaryOptions& options, uint64_t length) {
  if (auto status = options.use_positions ? CheckPositions(options, length) : CheckFractions(options);
      !status.ok()) {
    return status;
  }
  if (options.quantile_levels.size() > kMaxQuantileLevels) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "quantile_levels",
                                 absl::StrCat(options.quantile_levels.size(), " levels"),
                                 "at most 32 levels"});
  }
  for (size_t i = 0; i < options.quantile_levels.size(); ++i) {
    const double level = options.quantile_levels[i];
    if (!(level > 0.0 && level <= 1.0)) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("quantile_levels[", i, "]"),
                                   FormatValue(level), "(0, 1]"});
    }
  }
  return absl::OkStatus();
}

absl::Status CheckProfileValues(std::span<const double> values, const std::string& field) {
  bool any_positive = false;
  for (size_t j = 0; j < values.size(); ++j) {
    if (!(std::isfinite(values[j]) && values[j] >= 0.0)) {
      return InvalidArgumentError({ErrorReason::kInvalidProfile, absl::StrCat(field, "[", j, "]"),
                                   FormatValue(values[j]), "finite and >= 0"});
    }
    any_positive = any_positive || values[j] > 0.0;
  }
  if (!any_positive) {
    return InvalidArgumentError({ErrorReason::kInvalidProfile, field,
                                 absl::StrCat(values.size(), " values, none positive"),
                                 "at least one positive value"});
  }
  return absl::OkStatus();
}

ProfileSummary SummarizeValues(std::span<const double> values, const SummaryOptions& options) {
  const uint64_t length = values.size();
  ProfileSummary summary;
  summary.length = length;
  for (double value : values) summary.total += value;
  const double scale = 1.0 / summary.total;
  summary.first_weight = values.front() * scale;
  summary.last_weight = values.back() * scale;
  const auto floor = std::min_element(values.begin(), values.end());
  summary.floor_value = *floor * scale;
  summary.floor_position = static_cast<uint64_t>(floor - values.begin()) + 1;
  summary.floor_x = static_cast<double>(summary.floor_position) / static_cast<double>(length);
  summary.last_token_jump = length >= 2 && values[length - 2] > 0.0
                                ? values[length - 1] / values[length - 2]
                                : 0.0;
  const Bands bands = ResolveBands(options, length);
  std::vector<double> levels = options.quantile_levels;
  std::vector<QuantilePoint> quantiles(levels.size());
  double cumulative = 0.0;
  for (uint64_t j = 1; j <= length; ++j) {
    const double p = values[j - 1] * scale;
    (j <= bands.leading_end ? summary.leading_mass
                            : (j >= bands.trailing_start ? summary.trailing_mass
                                                         : summary.middle_mass)) += p;
    cumulative += p;
    for (size_t q = 0; q < levels.size(); ++q) {
      // Rounding can leave the total a hair below 1: the last position always reaches it.
      if (quantiles[q].position == 0 && (cumulative >= levels[q] || j == length)) {
        quantiles[q] = {levels[q], j, static_cast<double>(j) / static_cast<double>(length)};
      }
    }
  }
  summary.quantiles = std::move(quantiles);
  return summary;
}

ProfileSummary SummarizeContinuum(const ContinuumProfile& profile, const SummaryOptions& options) {
  ProfileSummary summary;
  summary.total = 1.0;
  summary.last_weight = profile.atom();
  summary.floor_value = profile.floor();
  summary.floor_x = 1.0;
  const double leading_edge = options.leading_fraction;
  const double trailing_edge = 1.0 - options.trailing_fraction;
  summary.leading_mass = leading_edge > 0.0 ? profile.Cdf(leading_edge) : 0.0;
  summary.trailing_mass = trailing_edge > 0.0 ? profile.Ccdf(trailing_edge) : 1.0;
  summary.middle_mass = std::max(0.0, 1.0 - summary.leading_mass - summary.trailing_mass);
  for (double level : options.quantile_levels) {
    summary.quantiles.push_back({level, 0, ContinuumQuantile(profile, level)});
  }
  return summary;
}

}  // namespace posbias::density
