#include "server/statistics/recall_sweep.h"

#include <algorithm>
#include <cmath>

#include <boost/math/distributions/beta.hpp>
#include <boost/math/distributions/normal.hpp>

#include "server/statistics/sample_moments.h"

namespace posbias::statistics {
namespace {

// The share of positions [begin, begin + count) (1-based) in x_1..x_last; none when they sum to 0.
std::optional<double> SpanShare(const std::vector<double>& x, int64_t last, int64_t begin, int64_t count) {
  double span = 0, total = 0;
  for (int64_t j = 1; j <= last && j <= static_cast<int64_t>(x.size()); ++j) {
    total += x[j - 1];
    if (j >= begin && j < begin + count) span += x[j - 1];
  }
  if (!(total > 0)) return std::nullopt;
  return span / total;
}

}  // namespace

BinomialInterval ClopperPearson(int64_t successes, int64_t trials, double confidence) {
  BinomialInterval interval;
  if (trials < 1) return interval;
  const double k = static_cast<double>(successes), n = static_cast<double>(trials);
  const double tail = (1.0 - confidence) / 2.0;
  if (successes > 0) interval.low = boost::math::quantile(boost::math::beta_distribution<double>(k, n - k + 1), tail);
  if (successes < trials) {
    interval.high = boost::math::quantile(boost::math::beta_distribution<double>(k + 1, n - k), 1.0 - tail);
  }
  return interval;
}

std::optional<RecallCorrelation> PearsonCorrelation(const std::vector<double>& x, const std::vector<double>& y,
                                                    double confidence) {
  const size_t m = std::min(x.size(), y.size());
  if (m < 4) return std::nullopt;
  double mean_x = 0, mean_y = 0;
  for (size_t i = 0; i < m; ++i) mean_x += x[i], mean_y += y[i];
  mean_x /= static_cast<double>(m);
  mean_y /= static_cast<double>(m);
  double sxy = 0, sxx = 0, syy = 0;
  for (size_t i = 0; i < m; ++i) {
    sxy += (x[i] - mean_x) * (y[i] - mean_y);
    sxx += (x[i] - mean_x) * (x[i] - mean_x);
    syy += (y[i] - mean_y) * (y[i] - mean_y);
  }
  if (!(sxx > 0) || !(syy > 0)) return std::nullopt;
  RecallCorrelation correlation;
  correlation.cells = static_cast<int64_t>(m);
  correlation.r = std::clamp(sxy / std::sqrt(sxx * syy), -1.0, 1.0);
  if (std::abs(correlation.r) == 1.0) {
    correlation.low = correlation.high = correlation.r;
    return correlation;
  }
  const double z = std::atanh(correlation.r);
  const double half = boost::math::quantile(boost::math::normal_distribution<double>(), 0.5 + confidence / 2.0) /
                      std::sqrt(static_cast<double>(m) - 3.0);
  correlation.low = std::tanh(z - half);
  correlation.high = std::tanh(z + half);
  return correlation;
}

RecallSummary RecallSweepStatistics(const JacobianJobSpec::RecallSweep& sweep,
                                    const std::vector<std::vector<double>>& sample_sq_norm,
                                    const std::vector<NextTokenScore>& scores) {
  RecallSummary summary;
  summary.chance = sweep.Chance();
  summary.probes = sweep.Description();
  std::vector<double> shares, accuracies;
  for (size_t d = 0; d < sweep.depths.size(); ++d) {
    RecallDepth depth;
    depth.depth = sweep.depths[d];
    std::vector<double> log_probs, pair_shares, context_shares;
    for (int64_t i = 0; i < sweep.probes_per_depth; ++i) {
      const size_t s = d * static_cast<size_t>(sweep.probes_per_depth) + static_cast<size_t>(i);
      if (s >= scores.size() || s >= sample_sq_norm.size() || s >= sweep.pair_starts.size()) continue;
      ++depth.probes;
      depth.correct += scores[s].top() ? 1 : 0;
      log_probs.push_back(scores[s].log_prob);
      const auto& x = sample_sq_norm[s];
      const auto last = static_cast<int64_t>(x.size());
      if (auto share = SpanShare(x, last, sweep.pair_starts[s], sweep.pair_tokens[s])) pair_shares.push_back(*share);
      if (auto share = SpanShare(x, last - 1, sweep.pair_starts[s], sweep.pair_tokens[s])) {
        context_shares.push_back(*share);
      }
    }
    if (depth.probes > 0) {
      depth.accuracy = static_cast<double>(depth.correct) / static_cast<double>(depth.probes);
      const BinomialInterval interval = ClopperPearson(depth.correct, depth.probes);
      depth.accuracy_low = interval.low;
      depth.accuracy_high = interval.high;
    }
    const SampleMoments log_prob = MomentsOf(log_probs), pair = MomentsOf(pair_shares), context = MomentsOf(context_shares);
    depth.log_prob_mean = log_prob.mean;
    depth.log_prob_std = log_prob.std;
    depth.log_prob_stderr = log_prob.standard_error;
    depth.pair_share_mean = pair.mean;
    depth.pair_share_stderr = pair.standard_error;
    depth.pair_context_share_mean = context.mean;
    depth.pair_context_share_stderr = context.standard_error;
    summary.depths.push_back(depth);
    shares.push_back(depth.pair_context_share_mean);
    accuracies.push_back(depth.accuracy);
  }
  summary.share_accuracy = PearsonCorrelation(shares, accuracies);
  return summary;
}

std::optional<RecallCorrelation> PooledRecallCorrelation(const std::vector<const RecallSummary*>& summaries) {
  std::vector<double> shares, accuracies;
  for (const RecallSummary* summary : summaries) {
    for (const RecallDepth& depth : summary->depths) {
      shares.push_back(depth.pair_context_share_mean);
      accuracies.push_back(depth.accuracy);
    }
  }
  return PearsonCorrelation(shares, accuracies);
}

}  // namespace posbias::statistics
