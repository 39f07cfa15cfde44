// Needle-depth sweeps of text inputs, answered per depth. Torch-free and gRPC-free.
//
// A NEEDLE job places each filler at every depth and also runs it alone (the baseline). For a
// sample s with profile x over positions 1..L, the needle span's share is
//   share(s) = sum_{j = b..b+n-1} x_j / sum_{j = 1..L} x_j,
// b the depth's needle start and n the needle's tokens; the baseline share is the same sum over
// the same positions of the filler's needle-free sample. Per depth: mean, sample standard
// deviation (n - 1; 0 for one filler) and standard error over the fillers that have both.
#pragma once

#include <vector>

#include "server/jobs/jacobian_report.h"
#include "server/jobs/jacobian_spec.h"

namespace posbias::statistics {

// The job contract's report types these statistics fill in (jobs/jacobian_report.h).
using jobs::JacobianJobSpec;
using jobs::NeedleDepth;

std::vector<NeedleDepth> NeedleSweepShares(const JacobianJobSpec::NeedleSweep& sweep,
                                           const std::vector<std::vector<double>>& sample_sq_norm);

}  // namespace posbias::statistics
