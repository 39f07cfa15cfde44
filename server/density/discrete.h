// The exact finite-L profile of the routing model (THEORY.md sections 2 and 5).
//
//   coherent_j   = sum_r c_r  (M^r)_{L,j}          = (e_L^T prod_l ((1 - a_l) I + a_l M))_j
//   incoherent_j = sum_r c~_r ((M^r)_{L,j})^2      (per unit width; multiply by d for E||J_j||_F^2)
//
// The rows u^(r) = e_L^T M^r are suffix sums, u^(r+1)_j = sum_{i >= j} u^(r)_i / i. Instead of
// materializing them one after another, a single sweep from j = L down to 1 keeps the H running
// suffix sums s_r(j) = s_r(j+1) + s_{r-1}(j) / j side by side: O(H * L) time, O(L + H) memory,
// each row entry used once while it is in registers. All terms are positive; the relative error of
// an entry that is a normal double is at most about (L + H) double epsilons (sequential sums).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "absl/status/statusor.h"
#include "server/density/routing.h"

namespace posbias::density {

struct DiscreteOptions {
  bool coherent = true;
  bool incoherent = true;
  // Called every `check_every_positions` positions (0 = never); returning false cancels with
  // CANCELLED.
  std::function<bool()> keep_going;
  uint64_t check_every_positions = uint64_t{1} << 16;
};

struct DiscreteProfiles {
  uint64_t length = 0;
  std::vector<double> coherent;    // Index j - 1; empty when not requested.
  std::vector<double> incoherent;  // Index j - 1; empty when not requested.
};

// Requires 1 <= length (the caller enforces its own upper limit). A windowed routing goes through
// windowed.h (same outputs; the incoherent profile only with one window for every layer).
absl::StatusOr<DiscreteProfiles> ComputeDiscreteProfiles(const Routing& routing, uint64_t length,
                                                         const DiscreteOptions& options = {});

// The rows u^(r) = e_L^T M^r for r = 0..max_power, each of length L (index j - 1), for fits that
// recombine them under many alphas. Memory (max_power + 1) * L doubles.
std::vector<std::vector<double>> CesaroRowPowers(uint64_t length, uint32_t max_power);

}  // namespace posbias::density
