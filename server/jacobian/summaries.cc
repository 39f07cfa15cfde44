// A measurement's statistics over its samples' records (summaries.h).
#include "server/jacobian/summaries.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include <torch/torch.h>

namespace posbias::jacobian {

std::vector<double> ToVector(const torch::Tensor& t) {
  auto c = t.to(torch::kDouble).contiguous();
  return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
}

PathwayShares SharesOfPathways(const torch::Tensor& full, const torch::Tensor& value, const torch::Tensor& score) {
  // ||J_full||^2 = ||J_value||^2 + ||J_score||^2 + 2 <J_value, J_score>, per position.
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto defined = full > 0;
  PathwayShares shares;
  shares.ratio = torch::where(defined, value / full, nan);
  shares.score_share = torch::where(defined, score / full, nan);
  auto interference = full - value - score;  // 2 <J_value, J_score>.
  shares.interference_share = torch::where(defined, interference / full, nan);
  const auto norms = (value * score).sqrt();
  shares.cosine = torch::where(norms > 0, (0.5 * interference / norms).clamp(-1.0, 1.0), nan);
  return shares;
}

namespace {

// Mean, standard deviation (n - 1) and standard error over samples, per position.
PositionStats Stats(const std::vector<torch::Tensor>& per_sample) {
  auto stacked = torch::stack(per_sample);  // [S, L] float64.
  const int64_t n = stacked.size(0);
  auto mean = stacked.mean(0);
  auto std = n > 1 ? stacked.std(0, /*unbiased=*/true) : torch::zeros_like(mean);
  auto se = std / std::sqrt(static_cast<double>(n));
  auto to_vector = [](const torch::Tensor& t) {
    auto c = t.contiguous();
    return std::vector<double>(c.data_ptr<double>(), c.data_ptr<double>() + c.numel());
  };
  return {to_vector(mean), to_vector(std), to_vector(se)};
}

// compare_pathways, per output: the value pathway's profile, and per position and sample the
// shares of ||J_full||^2 (THEORY.md section 9): ratio = ||J_value||^2 / ||J_full||^2, score_share =
// ||J_full - J_value||^2 / ||J_full||^2, interference_share = 2 <J_value, J_score> / ||J_full||^2
// (ratio + score_share + interference_share = 1), and the cosine of J_value and J_score; each with
// mean, std and standard error over samples, and the same shares of the totals over positions.
void SummarizePathways(const std::vector<SampleRecord>& records, int64_t outputs, MeasureResult& result) {
  auto scalar = [](const std::vector<torch::Tensor>& per_sample) {
    const PositionStats stats = Stats(per_sample);
    return ScalarStats{stats.mean[0], stats.std[0], stats.stderr_mean[0]};
  };
  for (int64_t o = 0; o < outputs; ++o) {
    std::vector<torch::Tensor> value, ratio, score_share, interference_share, cosine, total, total_score, total_interference;
    for (const auto& record : records) {
      auto full = torch::tensor(record.sq_norm[o], torch::kDouble);
      value.push_back(torch::tensor(record.value_sq_norm[o], torch::kDouble));
      auto score = torch::tensor(record.score_sq_norm[o], torch::kDouble);
      const PathwayShares shares = SharesOfPathways(full, value.back(), score);
      ratio.push_back(shares.ratio);
      score_share.push_back(shares.score_share);
      interference_share.push_back(shares.interference_share);
      cosine.push_back(shares.cosine);
      const PathwayShares totals = SharesOfPathways(full.sum().view({1}), value.back().sum().view({1}), score.sum().view({1}));
      total.push_back(totals.ratio);
      total_score.push_back(totals.score_share);
      total_interference.push_back(totals.interference_share);
    }
    result.value_sq_norm.push_back(Stats(value));
    result.pathway_ratio.push_back(Stats(ratio));
    result.pathway_score_share.push_back(Stats(score_share));
    result.pathway_interference_share.push_back(Stats(interference_share));
    result.pathway_cosine.push_back(Stats(cosine));
    result.pathway_total_ratio.push_back(scalar(total));
    result.pathway_total_score_share.push_back(scalar(total_score));
    result.pathway_total_interference_share.push_back(scalar(total_interference));
  }
}

// Statistics over all samples' records, per output.

}  // namespace

// Statistics over all samples' records, per output.
void Summarize(const std::vector<SampleRecord>& records, const MeasureOptions& options, int64_t outputs,
               MeasureResult& result) {
  const auto n = static_cast<double>(records.size());
  for (int64_t o = 0; o < outputs; ++o) {
    std::vector<torch::Tensor> sq, norms;
    for (const auto& record : records) {
      sq.push_back(torch::tensor(record.sq_norm[o], torch::kDouble));
      norms.push_back(sq.back().sqrt());
    }
    result.sq_norm.push_back(Stats(sq));
    result.norm.push_back(Stats(norms));
    if (options.method == Method::kHutchinson) {
      auto total = torch::zeros({options.length}, torch::kDouble);
      for (const auto& record : records) total += torch::tensor(record.probe_var[o], torch::kDouble);
      result.estimator_stderr.push_back(ToVector(total.sqrt() / n));
    }
    if (options.keep_samples) {
      std::vector<std::vector<double>> raw;
      for (const auto& record : records) raw.push_back(record.sq_norm[o]);
      result.raw.push_back(std::move(raw));
    }
  }
  for (const auto& record : records) result.sample_sq_norm.push_back(record.sq_norm.back());
  if (options.score_next_token) {
    for (const auto& record : records) result.next_token.push_back(record.next_token.value_or(jobs::NextTokenScore{}));
  }
  if (options.compare_pathways) SummarizePathways(records, outputs, result);
  if (!records.empty() && !records.front().branch_ratio.empty()) {
    result.branch_ratio.assign(records.front().branch_ratio.size(), 0.0);
    for (const auto& record : records) {
      for (size_t l = 0; l < result.branch_ratio.size() && l < record.branch_ratio.size(); ++l) {
        result.branch_ratio[l] += record.branch_ratio[l] / n;
      }
    }
  }
}

}  // namespace posbias::jacobian
