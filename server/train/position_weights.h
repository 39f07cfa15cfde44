// Per-position weights of the next-token loss: two cures for the middle-position valley of
// "Lost in the Middle at Birth" (a freshly initialized causal decoder routes little of the middle
// of its context to the last position; THEORY.md sections 1-2).
//
// The loss of a sequence is sum_t w_t CE_t / L, where CE_t is the cross-entropy of the target at
// input position t = 1..L (the token t + 1 predicted from tokens 1..t), and the weights have mean 1
// over the L positions, so the loss keeps the scale of the plain mean (w_t = 1).
//
//  - inverse-rho: w_t proportional to 1 / rho_t, where rho_t is entry t of the exact discrete
//    routing row e_L^T N^H (N = (1 - alpha) I + alpha M, M the causal-mean matrix, H the model's
//    layer count; density/discrete.h, the coherent profile): the influence of input position t on
//    the last output under the Cesaro routing model. Positions the initialization routes weakly
//    (the middle) get proportionally larger weight.
//  - explicit weights: L numbers from a JSON file (--position-weights), used instead of the above.
//  - middle oversampling F >= 1: the weight of each target in the middle 80 % of positions
//    (0-based t-1 in [floor(L/10), L - floor(L/10))) is multiplied by F, as if those targets were
//    seen F times as often ("needle-style" oversampling of middle targets), then all weights are
//    renormalized to mean 1. It composes with either of the above.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::train {

enum class PositionWeighting { kNone, kInverseRho };

// "none" / "inverse-rho", and back (INVALID_ARGUMENT naming --position-weighting).
std::string PositionWeightingName(PositionWeighting weighting);
absl::StatusOr<PositionWeighting> ParsePositionWeighting(const std::string& name);

struct PositionWeightOptions {
  PositionWeighting weighting = PositionWeighting::kNone;
  double rho_alpha = 0.5;                // alpha of the routing model for inverse-rho, in (0, 1].
  std::vector<double> explicit_weights;  // L non-negative numbers (not all 0); replaces `weighting`.
  double middle_oversampling = 1.0;      // F >= 1: factor on the middle 80 % of target positions.
};

// OK or INVALID_ARGUMENT naming the flag (--rho-alpha, --middle-oversampling, --position-weights).
absl::Status ValidatePositionWeightOptions(const PositionWeightOptions& options);

// The L weights (index t - 1), mean 1. `layers` is H of the routing row for inverse-rho.
absl::StatusOr<std::vector<double>> PositionLossWeights(const PositionWeightOptions& options, int64_t length,
                                                        int64_t layers);

// Reads a JSON list of numbers (--position-weights FILE).
absl::StatusOr<std::vector<double>> ReadPositionWeightsFile(const std::string& path);

}  // namespace posbias::train
