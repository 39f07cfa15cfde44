// Comparing measured profiles of two models on the same inputs (THEORY.md section 11): birth
// against training, one checkpoint against the next. Torch-free and gRPC-free: the runner computes
// these with the report, the job service and the clients read them back.
//
// Every statistic is paired: sample s of both models saw the same token ids (and probes), so each
// is first computed per sample and then summarized over samples.
//  - A sample's profile w_j = m_j / sum_i m_i (m_j its squared norms) is split into bands of
//    positions: leading = the first n, trailing = the last n, middle = the rest, with
//    n = max(1, floor(L / 10)) (the paper's first 10 %, middle 80 %, last 10 %). A band's share is
//    the sum of w over it; first and last weight are w_1 and w_L.
//  - Paired log ratios against the reference (the job's first model): log(middle / middle_ref) per
//    sample (negative = a deeper valley than the reference's), and the same for the first and the
//    last weight; each with mean, standard deviation, standard error and a percentile bootstrap
//    interval of the mean over samples.
//  - Spearman's rank correlation of the two mean profiles (weak evidence alone, THEORY.md 7).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "server/jobs/jacobian_report.h"
#include "server/statistics/sample_moments.h"

namespace posbias::statistics {

// The job contract's report types these statistics fill in (jobs/jacobian_report.h).
using jobs::BandStatistics;
using jobs::ComparedModel;
using jobs::NextTokenScore;
using jobs::PairedLogRatio;
using jobs::ShareEstimate;

// Positions in the leading (and in the trailing) band of a profile of `length` positions.
int64_t EdgeBandPositions(int64_t length);

// One sample's shares of its profile (each in [0, 1]; leading + middle + trailing = 1).
struct BandShares {
  double leading = 0, middle = 0, trailing = 0, first = 0, last = 0;
};
// INVALID_ARGUMENT when the profile has fewer than 3 positions (no middle band), a negative or
// non-finite value, or sums to 0.
absl::StatusOr<BandShares> SharesOf(const std::vector<double>& profile);

// A mean over samples with its spread and a bootstrap interval of the mean.
struct PairedEstimate {
  SampleMoments moments;
  double low = 0, high = 0;  // Percentile bootstrap interval of the mean.
  int64_t samples = 0;       // Samples used (those whose ratio is defined: both values > 0).
};

struct ComparisonOptions {
  int64_t bootstrap_resamples = 2000;  // Resamples of the samples (with replacement).
  double confidence = 0.95;            // Coverage of the bootstrap interval.
  uint64_t seed = 0;                   // The bootstrap's random stream (results are reproducible).
  size_t reference = 0;                // The model every other is paired against (an index of models).
};

// One model's profiles against the reference's, sample by sample.
struct ProfileComparison {
  // This model's band shares over samples (mean, std, standard error).
  SampleMoments leading, middle, trailing, first, last;
  // Paired against the reference (absent for the reference itself: all zero, samples 0).
  PairedEstimate middle_log_ratio, first_log_ratio, last_log_ratio;
  double spearman = 0;  // Of the mean profiles (1 for the reference).
};

// `reference` and `other` are [sample][position] squared norms of the same samples. The shapes
// must match (INVALID_ARGUMENT otherwise); SharesOf's errors name the sample.
absl::StatusOr<ProfileComparison> CompareProfilesPaired(const std::vector<std::vector<double>>& reference,
                                                        const std::vector<std::vector<double>>& other,
                                                        const ComparisonOptions& options = {});

// One model of a comparison job as measured: who it is and its per-sample squared norms
// [sample][position 1..T] (the samples in the reference's order).
struct MeasuredModel {
  std::string model, uid, weights_sha256;
  std::vector<std::vector<double>> samples;
  std::vector<NextTokenScore> next_token;  // Recall jobs: each sample's answer, as the model scored it.
};

// The report's comparison, in the models' order: the reference (options.reference, the first by
// default) has its own shares, no ratios and Spearman 1; every other one is compared with it by
// CompareProfilesPaired, over all positions 1..T and over the context alone, 1..T-1 (the target's
// own position left out; from 4 positions on). A reference index outside the models:
// INVALID_ARGUMENT.
absl::StatusOr<std::vector<ComparedModel>> CompareModels(const std::vector<MeasuredModel>& models,
                                                         const ComparisonOptions& options = {});

// The mean and percentile bootstrap interval of `values` (resampled with replacement).
PairedEstimate BootstrapMean(const std::vector<double>& values, const ComparisonOptions& options);

}  // namespace posbias::statistics
