#include "server/density/comparison.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

namespace posbias::density {
namespace {

// Average ranks (1-based) with ties sharing the mean of their ranks.
std::vector<double> AverageRanks(std::span<const double> values) {
  std::vector<size_t> order(values.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return values[a] < values[b]; });
  std::vector<double> ranks(values.size());
  for (size_t start = 0; start < order.size();) {
    size_t end = start;
    while (end + 1 < order.size() && values[order[end + 1]] == values[order[start]]) ++end;
    const double rank = 0.5 * static_cast<double>(start + end) + 1.0;
    for (size_t i = start; i <= end; ++i) ranks[order[i]] = rank;
    start = end + 1;
  }
  return ranks;
}

double PearsonCorrelation(std::span<const double> a, std::span<const double> b) {
  const double n = static_cast<double>(a.size());
  const double mean_a = std::accumulate(a.begin(), a.end(), 0.0) / n;
  const double mean_b = std::accumulate(b.begin(), b.end(), 0.0) / n;
  double cov = 0.0, var_a = 0.0, var_b = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    cov += (a[i] - mean_a) * (b[i] - mean_b);
    var_a += (a[i] - mean_a) * (a[i] - mean_a);
    var_b += (b[i] - mean_b) * (b[i] - mean_b);
  }
  return var_a > 0.0 && var_b > 0.0 ? cov / std::sqrt(var_a * var_b) : 0.0;
}

double LastJump(std::span<const double> p) {
  return p.size() >= 2 && p[p.size() - 2] > 0.0 ? p.back() / p[p.size() - 2] : 0.0;
}

}  // namespace

std::vector<double> Normalized(std::span<const double> values) {
  const double total = std::accumulate(values.begin(), values.end(), 0.0);
  std::vector<double> result(values.begin(), values.end());
  if (total > 0.0) {
    for (double& value : result) value /= total;
  }
  return result;
}

double SpearmanCorrelation(std::span<const double> a, std::span<const double> b) {
  const std::vector<double> rank_a = AverageRanks(a);
  const std::vector<double> rank_b = AverageRanks(b);
  return PearsonCorrelation(rank_a, rank_b);
}

double PearsonOfLogs(std::span<const double> a, std::span<const double> b) {
  std::vector<double> log_a, log_b;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] > 0.0 && b[i] > 0.0) {
      log_a.push_back(std::log(a[i]));
      log_b.push_back(std::log(b[i]));
    }
  }
  return log_a.size() >= 2 ? PearsonCorrelation(log_a, log_b) : 0.0;
}

double RmseOfLogs(std::span<const double> a, std::span<const double> b) {
  double sum = 0.0;
  size_t count = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] <= 0.0) continue;
    if (b[i] <= 0.0) return std::numeric_limits<double>::infinity();
    const double difference = std::log(a[i]) - std::log(b[i]);
    sum += difference * difference;
    ++count;
  }
  return count > 0 ? std::sqrt(sum / static_cast<double>(count)) : 0.0;
}

ComparisonMetrics CompareProfiles(std::span<const double> measured, std::span<const double> model) {
  const std::vector<double> m = Normalized(measured);
  const std::vector<double> p = Normalized(model);
  ComparisonMetrics metrics;
  metrics.spearman = SpearmanCorrelation(m, p);
  metrics.pearson_log = PearsonOfLogs(m, p);
  metrics.rmse_log = RmseOfLogs(m, p);
  double cum_m = 0.0, cum_p = 0.0;
  for (size_t j = 0; j < m.size(); ++j) {
    cum_m += m[j];
    cum_p += p[j];
    metrics.ks = std::max(metrics.ks, std::abs(cum_m - cum_p));
    metrics.wasserstein1 += std::abs(cum_m - cum_p);
  }
  metrics.wasserstein1 /= static_cast<double>(m.size());
  metrics.measured_last_weight = m.back();
  metrics.model_last_weight = p.back();
  metrics.measured_floor = *std::min_element(m.begin(), m.end());
  metrics.model_floor = *std::min_element(p.begin(), p.end());
  metrics.measured_last_jump = LastJump(m);
  metrics.model_last_jump = LastJump(p);
  return metrics;
}

}  // namespace posbias::density
