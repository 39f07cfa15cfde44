// Recall jobs answered per depth (the behaviour beside the mechanism): for each depth of the
// queried pair, how often the model's top next token at position L is the pair's value, with an
// exact binomial interval, the answer's log-probability, and the Jacobian share of the pair's
// positions; across depths (and across a comparison's models), the correlation of that share with
// the accuracy. Torch-free and gRPC-free.
//
// Definitions (probe i at one depth, S_i = its squared norms x_1..x_T, T = L):
//   correct_i        = the answer's logit is strictly the largest (no other id equal or above);
//   accuracy         = k / n over the depth's n probes, k correct; interval: Clopper-Pearson, 95 %;
//   log_prob         = log p(answer | context), mean, std (n - 1), standard error;
//   pair_share       = sum_{j in pair} x_j / sum_{j = 1..T} x_j      (the pair: key, "=", value);
//   pair_context_share = sum_{j in pair} x_j / sum_{j = 1..T-1} x_j  (the context alone);
//   correlation      = Pearson's r between the cells' mean pair_context_share and accuracy, with
//                      a 95 % Fisher-z interval tanh(atanh r +- 1.96 / sqrt(m - 3)) over m cells
//                      (absent below 4 cells or when either has no spread).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "server/jobs/jacobian_report.h"
#include "server/jobs/jacobian_spec.h"

namespace posbias::statistics {

// The job contract's report types these statistics fill in (jobs/jacobian_report.h).
using jobs::JacobianJobSpec;
using jobs::NextTokenScore;
using jobs::RecallCorrelation;
using jobs::RecallDepth;
using jobs::RecallSummary;

struct BinomialInterval {
  double low = 0, high = 1;
};
// The Clopper-Pearson ("exact") interval of a proportion, k successes in n >= 1 trials, at
// `confidence` (two-sided): the Beta quantiles Beta(a/2; k, n-k+1) and Beta(1-a/2; k+1, n-k),
// 0 at k = 0 and 1 at k = n.
BinomialInterval ClopperPearson(int64_t successes, int64_t trials, double confidence = 0.95);

// Pearson's r of paired values with the Fisher-z interval at `confidence`; nullopt below 4 pairs
// or when either side has no spread.
std::optional<RecallCorrelation> PearsonCorrelation(const std::vector<double>& x, const std::vector<double>& y,
                                                    double confidence = 0.95);

// One model's recall table: per depth of `sweep`, from each probe's squared norms (positions
// 1..T) and the score of its answer.
RecallSummary RecallSweepStatistics(const JacobianJobSpec::RecallSweep& sweep,
                                    const std::vector<std::vector<double>>& sample_sq_norm,
                                    const std::vector<NextTokenScore>& scores);

// The correlation over every model's cells (a comparison job's models x depths).
std::optional<RecallCorrelation> PooledRecallCorrelation(const std::vector<const RecallSummary*>& summaries);

}  // namespace posbias::statistics
