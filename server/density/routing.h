// The linear routing model of THEORY.md section 1: H layers N_l = (1 - alpha_l) I + alpha_l M.
//
// `Routing` is the validated form every density computation starts from. It is built only through
// MakeRouting / MakeScheduledRouting, which check depth and weights and name the offending field.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::density {

// Documented limits of the density room (also the API's limits).
inline constexpr uint32_t kMaxDepth = 100000;          // Constant alpha.
inline constexpr uint32_t kMaxScheduleDepth = 4096;    // Per-layer schedule (O(H^2) coefficients).

class Routing {
 public:
  uint32_t depth() const { return depth_; }
  bool is_constant() const { return constant_; }
  // The constant alpha; only meaningful when is_constant().
  double alpha() const { return alphas_.front(); }
  // alpha_l for l = 1..H (H copies of alpha when constant).
  std::vector<double> layer_alphas() const;

 private:
  friend absl::StatusOr<Routing> MakeRouting(uint32_t depth, double alpha);
  friend absl::StatusOr<Routing> MakeScheduledRouting(uint32_t depth,
                                                      const std::vector<double>& alphas);
  uint32_t depth_ = 0;
  bool constant_ = true;
  std::vector<double> alphas_;  // One entry when constant.
};

// Constant alpha in [0, 1] at depth 1..kMaxDepth.
absl::StatusOr<Routing> MakeRouting(uint32_t depth, double alpha);

// Per-layer alphas (1..kMaxScheduleDepth entries, each in [0, 1]). `depth` must be 0 (meaning the
// schedule's length) or equal to it.
absl::StatusOr<Routing> MakeScheduledRouting(uint32_t depth, const std::vector<double>& alphas);

}  // namespace posbias::density
