#include "server/statistics/needle_sweep.h"

#include <map>
#include <optional>

#include "server/statistics/sample_moments.h"

namespace posbias::statistics {
namespace {

// The share of positions begin..begin+count-1 (1-based) in x; none when x sums to 0.
std::optional<double> SpanShare(const std::vector<double>& x, int64_t begin, int64_t count) {
  double span = 0, total = 0;
  for (size_t j = 0; j < x.size(); ++j) {
    total += x[j];
    const auto position = static_cast<int64_t>(j) + 1;
    if (position >= begin && position < begin + count) span += x[j];
  }
  if (!(total > 0)) return std::nullopt;
  return span / total;
}

}  // namespace

std::vector<NeedleDepth> NeedleSweepShares(const JacobianJobSpec::NeedleSweep& sweep,
                                           const std::vector<std::vector<double>>& sample_sq_norm) {
  std::map<std::pair<int64_t, int64_t>, size_t> sample_of;  // {depth index, filler} -> sample.
  for (size_t s = 0; s < sweep.samples.size() && s < sample_sq_norm.size(); ++s) {
    if (sweep.samples[s].size() == 2) sample_of[{sweep.samples[s][0], sweep.samples[s][1]}] = s;
  }
  std::vector<NeedleDepth> depths;
  for (size_t d = 0; d < sweep.depths.size(); ++d) {
    std::vector<double> shares, baselines;
    for (const auto& [key, s] : sample_of) {
      if (key.first != static_cast<int64_t>(d)) continue;
      auto alone = sample_of.find({-1, key.second});
      if (alone == sample_of.end()) continue;
      auto share = SpanShare(sample_sq_norm[s], sweep.starts[d], sweep.needle_tokens);
      auto baseline = SpanShare(sample_sq_norm[alone->second], sweep.starts[d], sweep.needle_tokens);
      if (!share || !baseline) continue;
      shares.push_back(*share);
      baselines.push_back(*baseline);
    }
    const SampleMoments share = MomentsOf(shares), baseline = MomentsOf(baselines);
    NeedleDepth depth;
    depth.depth = sweep.depths[d];
    depth.start = sweep.starts[d];
    depth.tokens = sweep.needle_tokens;
    depth.fillers = static_cast<int64_t>(shares.size());
    depth.share_mean = share.mean;
    depth.share_std = share.std;
    depth.share_stderr = share.standard_error;
    depth.baseline_share_mean = baseline.mean;
    depth.baseline_share_std = baseline.std;
    depth.baseline_share_stderr = baseline.standard_error;
    depths.push_back(depth);
  }
  return depths;
}

}  // namespace posbias::statistics
