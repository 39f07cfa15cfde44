// A measurement's statistics over its samples: per output and position the mean, standard
// deviation (n - 1) and standard error of the records' squared norms and norms, Hutchinson's
// estimator error, compare_pathways' shares, and the branch ratios (engine.h's MeasureResult).
#pragma once

#include <cstdint>
#include <vector>

#include <torch/types.h>

#include "server/jacobian/engine.h"

namespace posbias::jacobian {

// A tensor's elements as float64 values, in order.
std::vector<double> ToVector(const torch::Tensor& t);

// Fills `result`'s statistics from every sample's record, `outputs` outputs each.
void Summarize(const std::vector<SampleRecord>& records, const MeasureOptions& options, int64_t outputs,
               MeasureResult& result);

}  // namespace posbias::jacobian
