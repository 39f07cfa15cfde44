// The routing model with sliding-window attention (THEORY.md section 9).
//
//   (M_w)_{ij} = 1 / min(i, w)  for max(1, i - w + 1) <= j <= i    (w = 0 or w >= L: M itself)
//   (u^T M_w)_j = sum_{i=j}^{min(L, j+w-1)} u_i / min(i, w)          a windowed suffix sum
//
// One product costs O(L): within blocks of w positions, suffix and prefix sums of u_i / min(i, w);
// a window is one block's suffix plus the next block's prefix (no subtraction). The
// coherent row e_L^T prod_l ((1 - a_l) I + a_l M_{w_l}) is L-vector sweeps from layer H down to
// layer 1 (the layers do not commute when their windows differ): O(H * L) time, O(L) memory.
// The incoherent profile sum_r c~_r ((e_L^T M_w^r)_j)^2 needs one window shared by every layer
// (then the rows are powers of one matrix); with layers of different windows it is a sum over
// the 2^H subsets of layers and is not computed (UNIMPLEMENTED).
//
// Accuracy: every term is nonnegative and only added, so each product's entries carry a relative
// error of at most about w double epsilons, and a profile about H * w (the golden tests check
// 1e-12 relative against exact fractions).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "server/density/discrete.h"
#include "server/density/routing.h"

namespace posbias::density {

// out = u^T M_w (u, out of one length L; w = 0 means full causal attention). `out` may not alias u.
void MultiplyByWindowedCesaro(std::span<const double> u, uint64_t window, std::span<double> out);

// The rows e_L^T M_w^r for r = 0..max_power (w = 0: the Cesaro rows, CesaroRowPowers).
std::vector<std::vector<double>> WindowedCesaroRowPowers(uint64_t length, uint32_t max_power, uint64_t window);

// ComputeDiscreteProfiles for a windowed routing (routing.windowed()).
absl::StatusOr<DiscreteProfiles> ComputeWindowedProfiles(const Routing& routing, uint64_t length,
                                                         const DiscreteOptions& options);

}  // namespace posbias::density
