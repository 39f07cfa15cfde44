// Mean, sample standard deviation (n - 1 denominator; 0 for one value) and standard error
// std / sqrt(n) of per-sample values, torch-free: the statistics text inputs report over samples
// (boundary_spikes.h, needle_sweep.h). All 0 for no values.
#pragma once

#include <cmath>
#include <vector>

namespace posbias::statistics {

struct SampleMoments {
  double mean = 0, std = 0, standard_error = 0;
};

inline SampleMoments MomentsOf(const std::vector<double>& values) {
  SampleMoments m;
  if (values.empty()) return m;
  const auto n = static_cast<double>(values.size());
  for (double v : values) m.mean += v;
  m.mean /= n;
  double squares = 0;
  for (double v : values) squares += (v - m.mean) * (v - m.mean);
  m.std = values.size() > 1 ? std::sqrt(squares / (n - 1)) : 0.0;
  m.standard_error = m.std / std::sqrt(n);
  return m;
}

}  // namespace posbias::statistics
