#include "server/statistics/boundary_spikes.h"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <map>
#include <optional>
#include <set>

#include "server/statistics/sample_moments.h"

namespace posbias::statistics {
namespace {

// r(b) of profile x (0-based), when b has all its neighbours and a positive denominator.
std::optional<double> SpikeRatio(const std::vector<double>& x, int64_t b) {
  const auto length = static_cast<int64_t>(x.size());
  if (b - kSpikeNeighbours < 1 || b + kSpikeNeighbours > length) return std::nullopt;
  double sum = 0;
  for (int64_t j = b - kSpikeNeighbours; j <= b + kSpikeNeighbours; ++j) {
    if (j != b) sum += x[static_cast<size_t>(j - 1)];
  }
  if (!(sum > 0)) return std::nullopt;
  return x[static_cast<size_t>(b - 1)] / (sum / (2 * kSpikeNeighbours));
}

}  // namespace

std::vector<BoundarySpike> BoundarySpikes(const std::vector<std::vector<int64_t>>& document_starts,
                                          const std::vector<std::vector<double>>& sample_sq_norm) {
  std::map<int64_t, std::vector<size_t>> starting;  // b -> the samples with a document start at b.
  for (size_t s = 0; s < document_starts.size() && s < sample_sq_norm.size(); ++s) {
    for (int64_t b : std::set<int64_t>(document_starts[s].begin(), document_starts[s].end())) starting[b].push_back(s);
  }
  std::vector<BoundarySpike> spikes;
  for (const auto& [b, samples] : starting) {
    std::vector<double> ratios, mean_profile;
    for (size_t s : samples) {
      const auto& x = sample_sq_norm[s];
      if (mean_profile.empty()) mean_profile.assign(x.size(), 0.0);
      if (x.size() != mean_profile.size()) continue;
      if (auto r = SpikeRatio(x, b)) {
        ratios.push_back(*r);
        for (size_t j = 0; j < x.size(); ++j) mean_profile[j] += x[j];
      }
    }
    if (ratios.empty()) continue;
    const auto n = static_cast<double>(ratios.size());
    for (double& value : mean_profile) value /= n;
    BoundarySpike spike;
    spike.position = b;
    spike.ratio = SpikeRatio(mean_profile, b).value_or(std::nan(""));
    const SampleMoments own = MomentsOf(ratios);
    spike.ratio_mean = own.mean;
    spike.ratio_std = own.std;
    spike.ratio_stderr = own.standard_error;
    spike.samples = static_cast<int64_t>(ratios.size());
    spikes.push_back(spike);
  }
  return spikes;
}

std::vector<BoundarySpike> BoundarySpikesOfMeans(const std::vector<std::vector<int64_t>>& document_starts,
                                                 const std::vector<double>& m) {
  std::vector<BoundarySpike> spikes;
  if (document_starts.empty()) return spikes;
  std::set<int64_t> shared(document_starts.front().begin(), document_starts.front().end());
  for (const auto& starts : document_starts) {
    std::set<int64_t> mine(starts.begin(), starts.end()), both;
    std::set_intersection(shared.begin(), shared.end(), mine.begin(), mine.end(), std::inserter(both, both.end()));
    shared = std::move(both);
  }
  for (int64_t b : shared) {
    if (auto r = SpikeRatio(m, b)) {
      BoundarySpike spike;
      spike.position = b;
      spike.ratio = *r;
      spikes.push_back(spike);
    }
  }
  return spikes;
}

}  // namespace posbias::statistics
