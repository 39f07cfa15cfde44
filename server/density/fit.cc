#include "server/density/fit.h"

#include "server/density/windowed.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include <boost/math/tools/minima.hpp>

#include "absl/strings/str_cat.h"
#include "server/density/discrete.h"
#include "server/density/mixing.h"
#include "server/density/routing.h"
#include "server/density/summary.h"
#include "server/status/error.h"

namespace posbias::density {
namespace {

constexpr int kScanPoints = 21;
constexpr int kBrentBits = 40;
constexpr uintmax_t kBrentMaxIterations = 200;
// A depth is on the ridge when its objective is within 5 % of the best plus 0.01 (1 % noise in
// the profile): without the absolute part, exact data would give a one-point ridge.
constexpr double kRidgeRelativeTolerance = 1.05;
constexpr double kRidgeAbsoluteTolerance = 0.01;

// Whether the model predicts the measured quantity squared (coherent: v^2 for squared norms) or
// under a square root (incoherent: sqrt(w) for norms and weights).
double Predicted(Model model, Quantity quantity, double raw) {
  if (model == Model::kCoherent) return quantity == Quantity::kSquaredNorm ? raw * raw : raw;
  return quantity == Quantity::kSquaredNorm ? raw : std::sqrt(raw);
}

double Objective(std::span<const double> measured, const std::vector<double>& profile) {
  const double rmse = RmseOfLogs(measured, profile);
  return std::isfinite(rmse) ? rmse : std::numeric_limits<double>::max();
}

// The normalized model profile at (depth, alpha).
using ProfileAt = std::function<std::vector<double>(uint32_t depth, double alpha)>;

RidgePoint FitAlphaAtDepth(const ProfileAt& profile_at, std::span<const double> measured, uint32_t depth) {
  auto objective = [&](double alpha) { return Objective(measured, profile_at(depth, alpha)); };
  int best = 0;
  std::vector<double> scan(kScanPoints);
  for (int i = 0; i < kScanPoints; ++i) {
    scan[i] = objective(static_cast<double>(i) / (kScanPoints - 1));
    if (scan[i] < scan[best]) best = i;
  }
  const double low = std::max(0, best - 1) / double(kScanPoints - 1);
  const double high = std::min(kScanPoints - 1, best + 1) / double(kScanPoints - 1);
  uintmax_t iterations = kBrentMaxIterations;
  const auto [alpha, value] =
      boost::math::tools::brent_find_minima(objective, low, high, kBrentBits, iterations);
  if (value <= scan[best]) return {depth, alpha, value};
  return {depth, static_cast<double>(best) / (kScanPoints - 1), scan[best]};
}

ModelFit FitModel(const ProfileAt& profile_at, std::span<const double> measured, Model model,
                  const FitOptions& options) {
  ModelFit fit;
  fit.model = model;
  for (uint32_t depth = options.min_depth; depth <= options.max_depth; ++depth) {
    fit.ridge.push_back(FitAlphaAtDepth(profile_at, measured, depth));
  }
  const auto best = std::min_element(fit.ridge.begin(), fit.ridge.end(),
                                     [](const auto& a, const auto& b) { return a.rmse_log < b.rmse_log; });
  fit.depth = best->depth;
  fit.alpha = best->alpha;
  fit.lambda = fit.alpha * fit.depth;
  fit.lambda_low = fit.lambda_high = fit.lambda;
  for (const RidgePoint& point : fit.ridge) {
    if (point.rmse_log > kRidgeRelativeTolerance * best->rmse_log + kRidgeAbsoluteTolerance) continue;
    fit.lambda_low = std::min(fit.lambda_low, point.alpha * point.depth);
    fit.lambda_high = std::max(fit.lambda_high, point.alpha * point.depth);
  }
  std::vector<double> profile = profile_at(fit.depth, fit.alpha);
  fit.metrics = CompareProfiles(measured, profile);
  if (options.include_profiles) fit.profile = std::move(profile);
  return fit;
}

// The coherent profile of constant alpha over `depth` layers whose windows repeat `pattern`:
// row L of the layers' product, squared for squared norms, normalized.
std::vector<double> PatternProfile(size_t length, const std::vector<uint32_t>& pattern, Quantity quantity,
                                   uint32_t depth, double alpha) {
  std::vector<uint32_t> windows(depth);
  for (uint32_t l = 0; l < depth; ++l) windows[l] = pattern[l % pattern.size()];
  const Routing routing = *WithAttentionWindows(*MakeRouting(depth, alpha), 0, windows);
  DiscreteOptions options;
  options.incoherent = false;
  std::vector<double> raw = ComputeDiscreteProfiles(routing, length, options)->coherent;
  for (double& value : raw) value = Predicted(Model::kCoherent, quantity, value);
  return Normalized(raw);
}

}  // namespace

std::vector<double> ModelProfile(const std::vector<std::vector<double>>& rows, Model model,
                                 Quantity quantity, uint32_t depth, double alpha) {
  const Routing routing = *MakeRouting(depth, alpha);
  const MixingCoefficients coefficients = model == Model::kCoherent
                                              ? CoherentCoefficients(routing)
                                              : IncoherentCoefficients(routing);
  const size_t length = rows.front().size();
  std::vector<double> raw(length, 0.0);
  for (uint32_t r = coefficients.r_min; r <= coefficients.r_max; ++r) {
    const double c = coefficients.c(r);
    const std::vector<double>& row = rows[r];
    if (model == Model::kCoherent) {
      for (size_t j = 0; j < length; ++j) raw[j] += c * row[j];
    } else {
      for (size_t j = 0; j < length; ++j) raw[j] += c * row[j] * row[j];
    }
  }
  for (double& value : raw) value = Predicted(model, quantity, value);
  return Normalized(raw);
}

bool WindowsDiffer(const std::vector<uint32_t>& layer_windows) {
  return std::adjacent_find(layer_windows.begin(), layer_windows.end(), std::not_equal_to<>()) != layer_windows.end();
}

absl::Status CheckFitRequest(std::span<const double> measured, const FitOptions& options) {
  if (measured.size() < 3) {
    return InvalidArgumentError({ErrorReason::kInvalidProfile, "measured.values",
                                 absl::StrCat(measured.size(), " values"), "3..65536 values"});
  }
  if (measured.size() > kMaxFitLength) {
    return TooLargeError("measured.values", absl::StrCat(measured.size(), " values"),
                         "3..65536 values");
  }
  if (auto status = CheckProfileValues(measured, "measured.values"); !status.ok()) return status;
  if (options.min_depth == options.max_depth &&
      (options.min_depth < 1 || options.min_depth > kMaxFitDepth)) {
    return InvalidArgumentError({ErrorReason::kInvalidDepth, "depth.fixed", std::to_string(options.min_depth),
                                 "1..4096"});
  }
  if (options.min_depth < 1 || options.max_depth > kMaxFitDepth ||
      options.min_depth > options.max_depth) {
    return InvalidArgumentError({ErrorReason::kInvalidDepth, "depth.range",
                                 absl::StrCat(options.min_depth, "..", options.max_depth),
                                 "1 <= min <= max <= 4096"});
  }
  if (options.max_depth - options.min_depth + 1 > kMaxFitDepthCount) {
    return InvalidArgumentError({ErrorReason::kInvalidDepth, "depth.range",
                                 absl::StrCat(options.min_depth, "..", options.max_depth),
                                 "at most 64 depths"});
  }
  if (!options.layer_windows.empty() && options.attention_window != 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "attention_window",
                                 std::to_string(options.attention_window),
                                 "0 when layer_windows is given (one or the other)"});
  }
  if (uint64_t{options.max_depth} * measured.size() > kMaxFitWork) {
    return TooLargeError("depth.max * length",
                         absl::StrCat(uint64_t{options.max_depth} * measured.size()),
                         "at most 16777216");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<ModelFit>> FitProfile(std::span<const double> measured,
                                                 const FitOptions& options) {
  if (auto status = CheckFitRequest(measured, options); !status.ok()) return status;
  const std::vector<double> normalized = Normalized(measured);
  std::vector<ModelFit> fits;
  if (WindowsDiffer(options.layer_windows)) {
    for (Model model : options.models) {
      if (model == Model::kIncoherent) {
        return InvalidArgumentError({ErrorReason::kInvalidArgument, "models", "incoherent",
                                     "coherent only with windows that differ between layers (the incoherent "
                                     "model is a sum over the 2^H subsets of layers)"});
      }
    }
    const ProfileAt profile_at = [&](uint32_t depth, double alpha) {
      return PatternProfile(measured.size(), options.layer_windows, options.quantity, depth, alpha);
    };
    for (Model model : options.models) fits.push_back(FitModel(profile_at, normalized, model, options));
    return fits;
  }
  // One window for every layer: the rows of the routing matrix's powers, M's or M_w's, once.
  const uint32_t window = options.layer_windows.empty() ? options.attention_window : options.layer_windows.front();
  const auto rows = window == 0 ? CesaroRowPowers(measured.size(), options.max_depth)
                                : WindowedCesaroRowPowers(measured.size(), options.max_depth, window);
  for (Model model : options.models) {
    const ProfileAt profile_at = [&, model](uint32_t depth, double alpha) {
      return ModelProfile(rows, model, options.quantity, depth, alpha);
    };
    fits.push_back(FitModel(profile_at, normalized, model, options));
  }
  return fits;
}

}  // namespace posbias::density
