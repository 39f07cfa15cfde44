// Boundary spike ratios of text inputs: how much more a document start b weighs than the
// positions around it. Torch-free and gRPC-free (the runner computes them with the report; the
// job service reads them back).
//
// For a position b and a profile x over positions 1..L, the spike ratio is
//   r(b) = x_b / mean(x_{b-2}, x_{b-1}, x_{b+1}, x_{b+2}),
// defined for b in 3..L-2 (all kSpikeNeighbours neighbours on each side inside the sequence; nearer
// an end the profile's own U-shape makes r far from 1 where nothing happens) and a positive
// denominator. It is near 1 where a start adds nothing.
#pragma once

#include <cstdint>
#include <vector>

#include "server/jobs/jacobian_report.h"

namespace posbias::statistics {

// The job contract's report types these statistics fill in (jobs/jacobian_report.h).
using jobs::BoundarySpike;

// Neighbours on each side a boundary's spike ratio compares it with.
inline constexpr int64_t kSpikeNeighbours = 2;

// The spike at every position b in 3..L-2 where at least one sample has a document start (each
// needle depth of a sweep, each boundary of a chunking run): over the samples S_b that start a
// document there, `ratio` is r(b) of their mean profile and ratio_mean / _std / _stderr are the
// mean, sample standard deviation (n - 1; 0 when n = 1) and standard error of each sample's own
// r(b) (samples whose denominator is 0 are left out of both; `samples` counts those used).
// `document_starts` and `sample_sq_norm` are [sample]...; positions 1-based, profiles 0-based.
std::vector<BoundarySpike> BoundarySpikes(const std::vector<std::vector<int64_t>>& document_starts,
                                          const std::vector<std::vector<double>>& sample_sq_norm);

// Reports stored before per-sample spikes: r(b) of the mean profile `m` at the positions every
// sample starts a document at (ratio only; the per-sample fields are left unset).
std::vector<BoundarySpike> BoundarySpikesOfMeans(const std::vector<std::vector<int64_t>>& document_starts,
                                                 const std::vector<double>& m);

}  // namespace posbias::statistics
