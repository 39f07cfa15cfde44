// The linear routing model of THEORY.md section 1: H layers N_l = (1 - alpha_l) I + alpha_l M.
//
// `Routing` is the validated form every density computation starts from. It is built only through
// MakeRouting / MakeScheduledRouting, which check depth and weights and name the offending field.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/limits/limits.h"

namespace posbias::density {

// Documented limits of the density room (also the API's limits), from the limits table.
inline constexpr uint32_t kMaxDepth = limits::Default<uint32_t>(limits::Limit::kMaxDepth);  // Constant alpha.
// Per-layer schedule (O(H^2) coefficients).
inline constexpr uint32_t kMaxScheduleDepth = limits::Default<uint32_t>(limits::Limit::kMaxScheduleDepth);

class Routing {
 public:
  uint32_t depth() const { return depth_; }
  bool is_constant() const { return constant_; }
  // The constant alpha; only meaningful when is_constant().
  double alpha() const { return alphas_.front(); }
  // alpha_l for l = 1..H (H copies of alpha when constant).
  std::vector<double> layer_alphas() const;

  // Sliding-window attention (THEORY.md section 9): layer l's routing matrix is M_w with w its
  // window (row i averages positions max(1, i - w + 1)..i, Hugging Face's `sliding_window = w`);
  // 0 = full causal attention (M). Layer 1 is the one next to the input.
  bool windowed() const { return !windows_.empty(); }
  uint32_t window_of_layer(uint32_t layer) const { return windows_.empty() ? 0 : windows_[layer - 1]; }
  // The window every layer shares (0 = full causal), or nullopt when layers differ.
  std::optional<uint32_t> uniform_window() const;

 private:
  friend absl::StatusOr<Routing> MakeRouting(uint32_t depth, double alpha);
  friend absl::StatusOr<Routing> MakeScheduledRouting(uint32_t depth,
                                                      const std::vector<double>& alphas);
  friend absl::StatusOr<Routing> WithAttentionWindows(Routing routing, uint32_t window,
                                                      const std::vector<uint32_t>& layer_windows);
  uint32_t depth_ = 0;
  bool constant_ = true;
  std::vector<double> alphas_;  // One entry when constant.
  std::vector<uint32_t> windows_;  // Per layer 1..H; empty = full causal attention everywhere.
};

// Constant alpha in [0, 1] at depth 1..kMaxDepth.
absl::StatusOr<Routing> MakeRouting(uint32_t depth, double alpha);

// Per-layer alphas (1..kMaxScheduleDepth entries, each in [0, 1]). `depth` must be 0 (meaning the
// schedule's length) or equal to it.
absl::StatusOr<Routing> MakeScheduledRouting(uint32_t depth, const std::vector<double>& alphas);

// Adds attention windows: one `window` for every layer (0 = full causal), or `layer_windows`
// (w_1..w_H, layer 1 next to the input, 0 = full in that layer; exactly H entries). Windowed
// layers do not commute, so the schedule's order is the layers' order. Both a nonzero `window`
// and a schedule: INVALID_ARGUMENT.
absl::StatusOr<Routing> WithAttentionWindows(Routing routing, uint32_t window, const std::vector<uint32_t>& layer_windows);

}  // namespace posbias::density
