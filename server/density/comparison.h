// Agreement metrics between a measured profile and a model profile (THEORY.md section 7).
//
// Rank correlation alone cannot tell a coherent from an incoherent model (any decreasing profile with
// an end spike scores ~0.999), so level-based metrics come with it: RMSE and Pearson of logs, KS and
// Wasserstein-1 distances of the normalized profiles, last weight, floor and last-token jump.
#pragma once

#include <span>
#include <vector>

namespace posbias::density {

struct ComparisonMetrics {
  double spearman = 0.0;
  double pearson_log = 0.0;
  double rmse_log = 0.0;
  double ks = 0.0;
  double wasserstein1 = 0.0;
  double measured_last_weight = 0.0;
  double model_last_weight = 0.0;
  double measured_floor = 0.0;
  double model_floor = 0.0;
  double measured_last_jump = 0.0;
  double model_last_jump = 0.0;
};

// Scales values to sum 1 (all-zero input stays zero).
std::vector<double> Normalized(std::span<const double> values);

// Spearman rank correlation with average ranks for ties; 0 when either side is constant.
double SpearmanCorrelation(std::span<const double> a, std::span<const double> b);

// Pearson correlation of ln a and ln b over positions where both are positive.
double PearsonOfLogs(std::span<const double> a, std::span<const double> b);

// Root mean square of ln a_j - ln b_j over positions where a_j > 0; +infinity if b_j = 0 there.
double RmseOfLogs(std::span<const double> a, std::span<const double> b);

// All metrics; both inputs normalized to sum 1 first. Same length, >= 2.
ComparisonMetrics CompareProfiles(std::span<const double> measured, std::span<const double> model);

}  // namespace posbias::density
