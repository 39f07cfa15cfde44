// Hutchinson's probes (THEORY.md section 6): the K cotangent rows u_1..u_K of one sample and
// output, and the estimator they make. Every distribution has E[u u^T] = I_d, so each row's
// ||u^T J_j||^2 is an unbiased estimate of ||J_j||_F^2 and the estimate is their mean.
//
// Independent units: the estimator's standard error comes from the spread of independent units
// of rows. Gaussian and Rademacher rows are independent, one unit each. Orthogonal rows are not:
// within a block they are orthonormal (negatively correlated), and the blocks are independent, so
// a block is one unit. Its rows are √d times the rows of a Haar-random d x d rotation (QR of a
// Gaussian matrix with the signs of R's diagonal taken out). A block of all d rows sums to
// Σ_i ||q_i^T J||^2 = ||J||_F^2 exactly, so K = d, or any multiple of d, is exact (standard error 0).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "server/jobs/jacobian_spec.h"

namespace posbias::jacobian {

using ProbeDistribution = jobs::ProbeDistribution;

// The orthogonal blocks' sizes for K probes of width d, in draw order: ceil(K / d) blocks when
// K >= d, two when 2 <= K < d (so that their spread gives an error bar), one when K = 1; sizes as
// equal as possible (the first K mod M one row longer), none above d.
std::vector<int64_t> ProbeBlockSizes(int64_t probes, int64_t width);

// The rows of one sample and output, drawn in order from `generator` (rows [start, start + n)
// with consecutive calls covering 0..K-1; a call with start = 0 begins the rows anew).
class ProbeRows {
 public:
  ProbeRows(ProbeDistribution distribution, int64_t probes, int64_t width);
  // Rows [start, start + rows) as a [rows, width] float64 tensor on the CPU.
  torch::Tensor Next(int64_t start, int64_t rows, at::Generator& generator);

 private:
  ProbeDistribution distribution_;
  int64_t probes_, width_;
  std::vector<int64_t> block_first_;  // Orthogonal: each block's first row, and K at the end.
  int64_t block_ = -1;                // The block in block_rows_.
  torch::Tensor block_rows_;          // [size, width] float64, scaled by √width.
};

// Per-position sums of one sample's squared VJP norms ||u_k^T J_j||^2 over its K probe rows, and
// the estimate with its variance from the spread of independent units (one row, or one block).
class ProbeEstimate {
 public:
  ProbeEstimate(ProbeDistribution distribution, int64_t probes, int64_t width, int64_t length);
  // Rows [first_row, first_row + n) of the K, in order: squares [n, L] float64.
  void Add(int64_t first_row, const torch::Tensor& squares);
  // The mean over rows [L] (the estimate of ||J_j||^2).
  torch::Tensor Mean() const;
  // The variance of Mean() [L]: sum_m w_m^2 s^2 with w_m = r_m / K the units' weights and s^2 the
  // spread of the M units' means b_m, sum_m (b_m - mean of b)^2 / (M - 1); 0 for one unit. (Block
  // sizes differ by at most one row, so the mean of b is Mean() up to that.)
  torch::Tensor VarianceOfMean() const;

 private:
  // Units' values [n, L] into the running count, mean and squared deviations.
  void AddUnits(const torch::Tensor& values);

  int64_t probes_;
  std::vector<int64_t> unit_first_;  // Each unit's first row, and K at the end; empty = one row each.
  size_t unit_ = 0;                  // The unit being summed (blocks only).
  torch::Tensor sum_, unit_mean_, unit_m2_, unit_partial_;
  double units_ = 0, weight_sq_sum_ = 0;
};

}  // namespace posbias::jacobian
