// The continuum limit of the routing model (THEORY.md section 3), x = j / L in (0, 1], t = ln(1/x):
//
//   rho_H(x) = c_0 delta(1 - x) + sum_{r=1..H} c_r t^(r-1) / (r-1)!                (density)
//   F(x)     = sum_{r=1..H} c_r Q(r, t)  for x < 1, F(1) = 1                         (CDF)
//
// with Q the regularized upper incomplete gamma function: X = U_1...U_R, R ~ Poisson-binomial(c),
// and -ln X | R = r ~ Gamma(r, 1). The pure causal model rho^M_H is alpha = 1.
//
// Evaluation regimes (each a short private path):
//  - Horner: for H <= 256 when every coefficient c_{k+1}/k! is a normal double and the polynomial
//    cannot overflow on t <= 745, the density is a polynomial in t with positive coefficients,
//    evaluated by Horner's rule (relative error <= 2H epsilon), several points at a time. The CDF
//    is x times such a polynomial, sum_k S_{k+1} t^k / k! (e^-t = x exactly), for x >= 2^-960; the
//    complementary CDF is 1 - F where F <= 1/2 (no digits lost) and the direct sum elsewhere.
//  - Log-concave sum: otherwise, and for the CDF (sum_k Poisson(k; t) S_{k+1}, S the survival of c)
//    and the complementary CDF (c_0 + sum_k Poisson(k; t) B_k, B the cumulative of c from r = 1),
//    see unimodal_sum.h. Both CDF sums are positive, so neither loses digits where it is tiny.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "server/density/mixing.h"
#include "server/density/routing.h"

namespace posbias::density {

// OK when x is in (0, 1]; otherwise INVALID_ARGUMENT (INVALID_POINT) naming `field`.
absl::Status CheckPoint(double x, const std::string& field);

class ContinuumProfile {
 public:
  explicit ContinuumProfile(const Routing& routing);

  uint32_t depth() const { return coefficients_.depth; }
  // Weight of the point mass at x = 1: c_0 = prod_l (1 - alpha_l).
  double atom() const { return coefficients_.c(0); }
  // lim_{x -> 1-} of the density: c_1.
  double floor() const { return coefficients_.c(1); }

  // Natural log of the continuous part at x in (0, 1]; -infinity where it is exactly 0.
  long double LogDensity(double x) const;
  double Density(double x) const;
  // P(X <= x) and P(X > x), each computed directly.
  double Cdf(double x) const;
  double Ccdf(double x) const;

  // Density and log-density at many points (either output may be empty to skip it). Points must
  // already be checked.
  void EvaluateDensity(std::span<const double> x, std::span<double> density,
                       std::span<double> log_density) const;
  // CDF and complementary CDF at many points (either output may be empty).
  void EvaluateCdf(std::span<const double> x, std::span<double> cdf, std::span<double> ccdf) const;

 private:
  bool HornerApplies(double t) const { return !horner_.empty() && t <= kHornerMaxT; }
  long double LogDensityBySum(long double t) const;
  long double LogCdf(long double t) const;
  long double LogCcdf(long double t) const;
  void EvaluateDensityBlock(const double* x, size_t count, double* density,
                            double* log_density) const;
  void EvaluateCdfBlock(const double* x, size_t count, double* cdf, double* ccdf) const;

  static constexpr double kHornerMaxT = 745.2;

  MixingCoefficients coefficients_;
  std::vector<double> coefficient_ratio_;  // c_{r+1} / c_r on the support.
  std::vector<double> horner_;             // c_{k+1} / k!, k = 0..H-1; empty when not applicable.
  std::vector<double> cdf_horner_;         // S_{k+1} / k!: F(x) = x * sum_k S_{k+1} t^k / k!.
  std::vector<long double> log_survival_;  // ln S_m = ln sum_{r >= m} c_r, m = 0..H+1.
  std::vector<long double> log_partial_;   // ln B_k = ln sum_{r=1..k} c_r, k = 0..H.
  std::vector<double> survival_ratio_;     // S_{k+2} / S_{k+1}, k = 0..H-1.
  std::vector<double> partial_ratio_;      // B_{k+1} / B_k, k = 1..H-1.
};

}  // namespace posbias::density
