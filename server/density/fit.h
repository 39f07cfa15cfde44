// Fitting the routing model to a measured per-position profile (THEORY.md sections 7 and 8).
//
// For each depth H considered, alpha is fitted by minimizing the RMSE of log-profiles (both
// normalized to sum 1): a scan of 21 alphas in [0, 1] brackets the minimum, Brent's method refines
// it. The Cesaro rows u^(r) = e_L^T M^r do not depend on alpha, so they are computed once and only
// recombined per trial. With a depth range, every depth is fitted and the best kept; because real
// profiles pin down lambda = alpha * H far better than H and alpha apart, the result reports lambda
// with the interval spanned by the depths whose objective is within 5 % of the best plus 0.01
// (the ridge).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "server/density/comparison.h"
#include "server/limits/limits.h"

namespace posbias::density {

enum class Quantity { kSquaredNorm, kNorm, kWeight };
enum class Model { kCoherent, kIncoherent };

// The fit's limits, from the limits table.
inline constexpr uint64_t kMaxFitLength = limits::Default<uint64_t>(limits::Limit::kMaxFitValues);
inline constexpr uint32_t kMaxFitDepth = limits::Default<uint32_t>(limits::Limit::kMaxFitDepth);
inline constexpr uint32_t kMaxFitDepthCount = limits::Default<uint32_t>(limits::Limit::kMaxFitDepths);
inline constexpr uint64_t kMaxFitWork = limits::Default<uint64_t>(limits::Limit::kMaxFitWork);  // max_depth * L.

struct FitOptions {
  Quantity quantity = Quantity::kSquaredNorm;
  std::vector<Model> models = {Model::kCoherent, Model::kIncoherent};
  uint32_t min_depth = 24;
  uint32_t max_depth = 24;
  bool include_profiles = false;
  // Sliding-window attention of w positions in every layer (0 = full causal): the fitted
  // profiles are rows of ((1 - a) I + a M_w)^H (windowed.h).
  uint32_t attention_window = 0;
  // Windows that differ between layers (a model's pattern, layer 1 next to the input; 0 = full
  // causal), repeated over each depth's layers: the fitted profile is row L of the product
  // prod_l ((1 - a) I + a M_{w_l}) in the layers' order, computed for every trial alpha (O(H L)
  // each). Only the coherent model (the incoherent one would sum over the 2^H subsets of layers);
  // not together with a nonzero attention_window. A pattern of one window is that window.
  std::vector<uint32_t> layer_windows;
};

struct RidgePoint {
  uint32_t depth = 0;
  double alpha = 0.0;
  double rmse_log = 0.0;
};

struct ModelFit {
  Model model = Model::kCoherent;
  uint32_t depth = 0;
  double alpha = 0.0;
  double lambda = 0.0;
  double lambda_low = 0.0;
  double lambda_high = 0.0;
  ComparisonMetrics metrics;
  std::vector<RidgePoint> ridge;
  std::vector<double> profile;  // Normalized model profile; only with include_profiles.
};

// Whether a pattern of per-layer windows holds two different windows (then only the coherent
// model has a profile the density room computes); a pattern of one window is that window.
bool WindowsDiffer(const std::vector<uint32_t>& layer_windows);

// Checks the measured values (>= 3 values, finite, >= 0, one positive) and the depth range.
absl::Status CheckFitRequest(std::span<const double> measured, const FitOptions& options);

absl::StatusOr<std::vector<ModelFit>> FitProfile(std::span<const double> measured,
                                                 const FitOptions& options);

// The normalized model profile for `quantity` at (depth, alpha), from precomputed Cesaro rows.
std::vector<double> ModelProfile(const std::vector<std::vector<double>>& rows, Model model,
                                 Quantity quantity, uint32_t depth, double alpha);

}  // namespace posbias::density
