#include "server/jacobian/probes.h"

#include <algorithm>
#include <cmath>
#include <tuple>

#include <torch/torch.h>

namespace posbias::jacobian {
namespace {

// Each block's first row and K at the end.
std::vector<int64_t> FirstRows(const std::vector<int64_t>& sizes) {
  std::vector<int64_t> first{0};
  for (int64_t size : sizes) first.push_back(first.back() + size);
  return first;
}

}  // namespace

std::vector<int64_t> ProbeBlockSizes(int64_t probes, int64_t width) {
  if (probes < 1 || width < 1) return {};
  const int64_t blocks = probes >= width ? (probes + width - 1) / width : std::min<int64_t>(probes, 2);
  std::vector<int64_t> sizes(blocks, probes / blocks);
  for (int64_t m = 0; m < probes % blocks; ++m) ++sizes[m];
  return sizes;
}

ProbeRows::ProbeRows(ProbeDistribution distribution, int64_t probes, int64_t width)
    : distribution_(distribution), probes_(probes), width_(width) {
  if (distribution_ == ProbeDistribution::kOrthogonal) block_first_ = FirstRows(ProbeBlockSizes(probes, width));
}

torch::Tensor ProbeRows::Next(int64_t start, int64_t rows, at::Generator& generator) {
  const auto cpu = torch::TensorOptions().dtype(torch::kFloat32);
  switch (distribution_) {
    case ProbeDistribution::kGaussian:  // Drawn in float32 (the stream of every earlier Gaussian job).
      return torch::randn({rows, width_}, generator, cpu).to(torch::kFloat64);
    case ProbeDistribution::kRademacher:
      return torch::randint(0, 2, {rows, width_}, generator, cpu).to(torch::kFloat64) * 2.0 - 1.0;
    case ProbeDistribution::kOrthogonal:
      break;
  }
  if (start == 0) block_ = -1;  // The rows begin anew (the next output, or the sample again).
  auto out = torch::empty({rows, width_}, torch::kFloat64);
  for (int64_t i = 0; i < rows;) {
    const int64_t row = start + i;
    const auto next = std::upper_bound(block_first_.begin(), block_first_.end(), row);
    const int64_t block = (next - block_first_.begin()) - 1;
    if (block != block_) {
      // Haar: Q of a Gaussian matrix's QR, its columns' signs fixed by R's diagonal.
      auto gaussian = torch::randn({width_, width_}, generator, torch::TensorOptions().dtype(torch::kFloat64));
      auto [q, r] = torch::linalg_qr(gaussian);
      auto signs = torch::sign(r.diagonal());
      signs = torch::where(signs == 0, torch::ones_like(signs), signs);
      const int64_t size = block_first_[block + 1] - block_first_[block];
      block_rows_ = (q * signs).narrow(0, 0, size) * std::sqrt(static_cast<double>(width_));
      block_ = block;
    }
    const int64_t offset = row - block_first_[block];
    const int64_t take = std::min(rows - i, block_first_[block + 1] - row);
    out.narrow(0, i, take).copy_(block_rows_.narrow(0, offset, take));
    i += take;
  }
  return out;
}

ProbeEstimate::ProbeEstimate(ProbeDistribution distribution, int64_t probes, int64_t width, int64_t length)
    : probes_(probes) {
  sum_ = torch::zeros({length}, torch::kDouble);
  unit_mean_ = torch::zeros_like(sum_);
  unit_m2_ = torch::zeros_like(sum_);
  unit_partial_ = torch::zeros_like(sum_);
  if (distribution == ProbeDistribution::kOrthogonal) {
    unit_first_ = FirstRows(ProbeBlockSizes(probes, width));
  } else {
    weight_sq_sum_ = 1.0 / static_cast<double>(probes);  // K units of weight 1 / K.
  }
}

void ProbeEstimate::AddUnits(const torch::Tensor& values) {
  // Chan et al.'s pairwise update of the count, mean and sum of squared deviations: no
  // cancellation, so units that agree to the last bit have no spread.
  const double n = static_cast<double>(values.size(0));
  const double total = units_ + n;
  auto mean = values.mean(0);
  auto m2 = (values - mean).pow(2).sum(0);
  auto delta = mean - unit_mean_;
  unit_m2_ += m2 + delta.pow(2) * (units_ * n / total);
  unit_mean_ += delta * (n / total);
  units_ = total;
}

void ProbeEstimate::Add(int64_t first_row, const torch::Tensor& squares) {
  sum_ += squares.sum(0);
  if (unit_first_.empty()) {
    AddUnits(squares);
    return;
  }
  const int64_t rows = squares.size(0);
  for (int64_t i = 0; i < rows;) {
    const int64_t row = first_row + i;
    const int64_t unit_end = unit_first_[unit_ + 1];
    const int64_t take = std::min(rows - i, unit_end - row);
    unit_partial_ += squares.narrow(0, i, take).sum(0);
    i += take;
    if (row + take == unit_end) {  // The block is complete: one unit's mean.
      const double size = static_cast<double>(unit_end - unit_first_[unit_]);
      AddUnits((unit_partial_ / size).unsqueeze(0));
      weight_sq_sum_ += std::pow(size / static_cast<double>(probes_), 2);
      unit_partial_.zero_();
      ++unit_;
    }
  }
}

torch::Tensor ProbeEstimate::Mean() const { return sum_ / static_cast<double>(probes_); }

torch::Tensor ProbeEstimate::VarianceOfMean() const {
  if (units_ < 2) return torch::zeros_like(sum_);
  return weight_sq_sum_ * unit_m2_ / (units_ - 1);
}

}  // namespace posbias::jacobian
