#include "server/density/continuum.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <limits>

#include "server/density/unimodal_sum.h"
#include "server/status/error.h"

namespace posbias::density {
namespace {

constexpr long double kNegInf = -std::numeric_limits<long double>::infinity();
constexpr uint32_t kHornerMaxDepth = 256;
constexpr double kHornerMinResult = 0x1p-960;  // Below this the log-space path takes over.
constexpr double kHornerMaxResult = 0x1p960;
constexpr size_t kBlock = 8;  // Points evaluated side by side in Horner's rule.

// ln(a) - ln(b) as a ratio in double (0 when a is outside the support).
double RatioOfLogs(long double log_a, long double log_b) {
  return log_a == kNegInf ? 0.0 : static_cast<double>(std::exp(log_a - log_b));
}

// Coefficients w_k / k! of a polynomial in t with positive weights w (given as logs, k = 0..n-1),
// or empty when a coefficient that matters is not a normal double or the polynomial could overflow
// on [0, t_max].
std::vector<double> HornerCoefficients(const std::vector<long double>& log_weight,
                                       long double t_max) {
  std::vector<double> coefficient(log_weight.size(), 0.0);
  long double bound = 0.0L;
  for (size_t k = 0; k < log_weight.size(); ++k) {
    if (log_weight[k] == kNegInf) continue;
    const long double log_coefficient = log_weight[k] - LogFactorial(k);
    coefficient[k] = static_cast<double>(std::exp(log_coefficient));
    if (coefficient[k] < DBL_MIN) return {};
    bound += std::exp(log_coefficient + k * std::log(t_max));
  }
  if (!(bound < kHornerMaxResult)) return {};
  while (!coefficient.empty() && coefficient.back() == 0.0) coefficient.pop_back();
  return coefficient;
}

// Horner's rule for `count` (<= kBlock) values of t at once, so the compiler can vectorize the
// independent chains. Positive coefficients and t >= 0: relative error <= 2 n epsilon.
void HornerBlock(const std::vector<double>& coefficient, const double* t, size_t count,
                 double* value) {
  double p[kBlock];
  double tt[kBlock];
  for (size_t i = 0; i < kBlock; ++i) tt[i] = i < count ? t[i] : 0.0;
  for (size_t i = 0; i < kBlock; ++i) p[i] = coefficient.back();
  for (size_t k = coefficient.size() - 1; k-- > 0;) {
    const double a = coefficient[k];
    for (size_t i = 0; i < kBlock; ++i) p[i] = p[i] * tt[i] + a;
  }
  std::copy(p, p + count, value);
}

}  // namespace

absl::Status CheckPoint(double x, const std::string& field) {
  if (x > 0.0 && x <= 1.0) return absl::OkStatus();  // False for NaN.
  return InvalidArgumentError({ErrorReason::kInvalidPoint, field, FormatValue(x), "(0, 1]"});
}

ContinuumProfile::ContinuumProfile(const Routing& routing)
    : coefficients_(CoherentCoefficients(routing)) {
  const uint32_t depth = coefficients_.depth;
  const auto& log_c = coefficients_.log_c;
  coefficient_ratio_.assign(depth + 1, 0.0);
  for (uint32_t r = coefficients_.r_min; r < coefficients_.r_max; ++r) {
    coefficient_ratio_[r] = RatioOfLogs(log_c[r + 1], log_c[r]);
  }
  log_survival_.assign(depth + 2, kNegInf);
  for (uint32_t m = depth + 1; m-- > 0;) log_survival_[m] = LogAddExp(log_survival_[m + 1], log_c[m]);
  log_partial_.assign(depth + 1, kNegInf);
  for (uint32_t k = 1; k <= depth; ++k) log_partial_[k] = LogAddExp(log_partial_[k - 1], log_c[k]);
  survival_ratio_.assign(depth + 1, 0.0);
  partial_ratio_.assign(depth + 1, 1.0);
  for (uint32_t k = 0; k + 2 <= depth + 1; ++k) {
    survival_ratio_[k] = RatioOfLogs(log_survival_[k + 2], log_survival_[k + 1]);
  }
  for (uint32_t k = 1; k < depth; ++k) {
    partial_ratio_[k] = log_partial_[k] == kNegInf ? 0.0 : RatioOfLogs(log_partial_[k + 1], log_partial_[k]);
  }
  if (depth <= kHornerMaxDepth) {
    // rho(x) = sum_k c_{k+1} t^k / k!, k = 0..H-1.
    horner_ = HornerCoefficients({log_c.begin() + 1, log_c.end()}, kHornerMaxT);
    // F(x) = e^-t sum_k S_{k+1} t^k / k!, k = 0..H-1, evaluated for t <= 665 (x >= 2^-960).
    cdf_horner_ = HornerCoefficients({log_survival_.begin() + 1, log_survival_.end() - 1}, 660.0);
  }
}

long double ContinuumProfile::LogDensityBySum(long double t) const {
  const uint64_t lo = std::max<uint32_t>(coefficients_.r_min, 1);
  const uint64_t hi = coefficients_.r_max;
  if (hi < 1) return kNegInf;  // alpha = 0: no continuous part.
  if (t == 0.0L) return lo == 1 ? coefficients_.log_c[1] : kNegInf;
  const long double log_t = std::log(t);
  const double td = static_cast<double>(t);
  // term_r = c_r t^(r-1) / (r-1)!;  term_{r+1} / term_r = (c_{r+1} / c_r) t / r.
  auto log_term = [&](uint64_t r) {
    return coefficients_.log_c[r] + (r - 1) * log_t - LogFactorial(r - 1);
  };
  auto ratio = [&](uint64_t r) { return coefficient_ratio_[r] * td / static_cast<double>(r); };
  return LogSumLogConcave(lo, hi, log_term, ratio);
}

long double ContinuumProfile::LogDensity(double x) const {
  return LogDensityBySum(-std::log(static_cast<long double>(x)));
}

double ContinuumProfile::Density(double x) const {
  double density = 0.0;
  EvaluateDensity({&x, 1}, {&density, 1}, {});
  return density;
}

namespace {

// Runs `block(x, count, first_out, second_out)` over blocks of kBlock points and copies the block
// outputs into the (optional, possibly empty) output spans.
template <typename Block>
void InBlocks(std::span<const double> x, std::span<double> first, std::span<double> second, const Block& block) {
  double block_first[kBlock];
  double block_second[kBlock];
  for (size_t start = 0; start < x.size(); start += kBlock) {
    const size_t count = std::min(kBlock, x.size() - start);
    block(x.data() + start, count, block_first, block_second);
    if (!first.empty()) std::copy(block_first, block_first + count, &first[start]);
    if (!second.empty()) std::copy(block_second, block_second + count, &second[start]);
  }
}

}  // namespace

void ContinuumProfile::EvaluateDensity(std::span<const double> x, std::span<double> density,
                                       std::span<double> log_density) const {
  InBlocks(x, density, log_density, [this](const double* points, size_t count, double* a, double* b) {
    EvaluateDensityBlock(points, count, a, b);
  });
}

void ContinuumProfile::EvaluateDensityBlock(const double* x, size_t count, double* density,
                                            double* log_density) const {
  double t[kBlock] = {};
  bool horner[kBlock] = {};
  for (size_t i = 0; i < count; ++i) {
    t[i] = -std::log(x[i]);
    horner[i] = HornerApplies(t[i]);
    if (!horner[i]) t[i] = 0.0;  // Evaluated below by the log-space sum instead.
  }
  if (!horner_.empty()) HornerBlock(horner_, t, count, density);
  for (size_t i = 0; i < count; ++i) {
    if (horner[i] && density[i] >= kHornerMinResult && density[i] <= kHornerMaxResult) {
      log_density[i] = std::log(density[i]);
      continue;
    }
    const long double log_value = LogDensity(x[i]);
    log_density[i] = static_cast<double>(log_value);
    density[i] = static_cast<double>(std::exp(log_value));
  }
}

long double ContinuumProfile::LogCdf(long double t) const {
  // F = sum_{k=0}^{H-1} p_k S_{k+1}, p_k = e^-t t^k / k!  (Poisson), S the survival of c.
  const uint64_t hi = coefficients_.r_max;  // S_{k+1} > 0 iff k + 1 <= r_max.
  if (hi < 1) return kNegInf;
  const long double log_t = std::log(t);
  const double td = static_cast<double>(t);
  auto log_term = [&](uint64_t k) {
    return -t + k * log_t - LogFactorial(k) + log_survival_[k + 1];
  };
  auto ratio = [&](uint64_t k) { return td / static_cast<double>(k + 1) * survival_ratio_[k]; };
  return LogSumLogConcave(0, hi - 1, log_term, ratio);
}

long double ContinuumProfile::LogCcdf(long double t) const {
  // 1 - F = c_0 + sum_{k>=1} p_k B_min(k,H), B_k = sum_{r=1..k} c_r.
  const uint32_t depth = coefficients_.depth;
  const long double log_atom = coefficients_.log_c[0];
  if (coefficients_.r_max < 1) return log_atom;
  const uint64_t lo = std::max<uint32_t>(coefficients_.r_min, 1);
  // Past k = max(H, 2t) + 200 the terms are below 2^-200 of the largest one.
  const uint64_t hi = std::max<uint64_t>(depth, static_cast<uint64_t>(2.0L * t)) + 200;
  const long double log_t = std::log(t);
  const double td = static_cast<double>(t);
  auto log_b = [&](uint64_t k) { return log_partial_[std::min<uint64_t>(k, depth)]; };
  auto log_term = [&](uint64_t k) { return -t + k * log_t - LogFactorial(k) + log_b(k); };
  auto ratio = [&](uint64_t k) {
    return td / static_cast<double>(k + 1) * (k < depth ? partial_ratio_[k] : 1.0);
  };
  return LogAddExp(log_atom, LogSumLogConcave(lo, hi, log_term, ratio));
}

void ContinuumProfile::EvaluateCdf(std::span<const double> x, std::span<double> cdf,
                                   std::span<double> ccdf) const {
  InBlocks(x, cdf, ccdf, [this](const double* points, size_t count, double* a, double* b) {
    EvaluateCdfBlock(points, count, a, b);
  });
}

void ContinuumProfile::EvaluateCdfBlock(const double* x, size_t count, double* cdf,
                                        double* ccdf) const {
  double t[kBlock] = {};
  bool horner[kBlock] = {};
  for (size_t i = 0; i < count; ++i) {
    horner[i] = !cdf_horner_.empty() && x[i] >= kHornerMinResult && x[i] < 1.0;
    t[i] = horner[i] ? -std::log(x[i]) : 0.0;
  }
  if (!cdf_horner_.empty()) HornerBlock(cdf_horner_, t, count, cdf);
  for (size_t i = 0; i < count; ++i) {
    cdf[i] = horner[i] ? cdf[i] * x[i] : Cdf(x[i]);
    ccdf[i] = cdf[i] <= 0.5 ? 1.0 - cdf[i] : Ccdf(x[i]);
  }
}

double ContinuumProfile::Cdf(double x) const {
  if (x >= 1.0) return 1.0;
  return static_cast<double>(std::exp(LogCdf(-std::log(static_cast<long double>(x)))));
}

double ContinuumProfile::Ccdf(double x) const {
  if (x >= 1.0) return 0.0;
  return static_cast<double>(std::exp(LogCcdf(-std::log(static_cast<long double>(x)))));
}

}  // namespace posbias::density
