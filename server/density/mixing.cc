#include "server/density/mixing.h"

#include <cmath>
#include <limits>

namespace posbias::density {
namespace {

constexpr long double kNegInf = -std::numeric_limits<long double>::infinity();
constexpr uint64_t kLogFactorialTableSize = uint64_t{1} << 17;

// ln Gamma(x) for x > 0 through the reentrant glibc routine (lgammal writes the global signgam).
long double LogGamma(long double x) {
  int sign = 0;
  return lgammal_r(x, &sign);
}

// Binomial closed form with weights p (attention branch) and q (residual), each possibly a square.
// ln c_r = ln H! - ln r! - ln (H-r)! + r ln p + (H - r) ln q, with 0^0 = 1.
std::vector<long double> BinomialLogCoefficients(uint32_t depth, long double log_p,
                                                 long double log_q) {
  std::vector<long double> log_c(depth + 1);
  const long double log_h_factorial = LogFactorial(depth);
  for (uint32_t r = 0; r <= depth; ++r) {
    const long double p_part = r == 0 ? 0.0L : r * log_p;
    const long double q_part = r == depth ? 0.0L : (depth - r) * log_q;
    log_c[r] = log_h_factorial - LogFactorial(r) - LogFactorial(depth - r) + p_part + q_part;
  }
  return log_c;
}

// Product expansion prod_l (q_l + p_l z) by the positive recurrence c_r <- q_l c_r + p_l c_{r-1}.
// No cancellation: each coefficient carries relative error <= ~2H long-double epsilons.
std::vector<long double> ExpandedLogCoefficients(const std::vector<double>& alphas, bool squared) {
  std::vector<long double> c(alphas.size() + 1, 0.0L);
  c[0] = 1.0L;
  for (size_t l = 0; l < alphas.size(); ++l) {
    long double p = alphas[l];
    long double q = 1.0L - p;
    if (squared) p *= p, q *= q;
    for (size_t r = l + 1; r >= 1; --r) c[r] = q * c[r] + p * c[r - 1];
    c[0] *= q;
  }
  for (auto& value : c) value = value > 0.0L ? std::log(value) : kNegInf;
  return c;
}

MixingCoefficients FromLogs(uint32_t depth, std::vector<long double> log_c) {
  MixingCoefficients coefficients;
  coefficients.depth = depth;
  coefficients.log_c = std::move(log_c);
  uint32_t r_min = 0;
  while (r_min < depth && coefficients.log_c[r_min] == kNegInf) ++r_min;
  uint32_t r_max = depth;
  while (r_max > r_min && coefficients.log_c[r_max] == kNegInf) --r_max;
  coefficients.r_min = r_min;
  coefficients.r_max = r_max;
  return coefficients;
}

MixingCoefficients Coefficients(const Routing& routing, bool squared) {
  if (!routing.is_constant()) {
    return FromLogs(routing.depth(), ExpandedLogCoefficients(routing.layer_alphas(), squared));
  }
  const long double alpha = routing.alpha();
  const long double factor = squared ? 2.0L : 1.0L;
  const long double log_p = alpha > 0.0L ? factor * std::log(alpha) : kNegInf;
  const long double log_q = alpha < 1.0L ? factor * std::log1p(-alpha) : kNegInf;
  return FromLogs(routing.depth(), BinomialLogCoefficients(routing.depth(), log_p, log_q));
}

}  // namespace

double MixingCoefficients::c(uint32_t r) const {
  return r <= depth ? static_cast<double>(std::exp(log_c[r])) : 0.0;
}

MixingCoefficients CoherentCoefficients(const Routing& routing) {
  return Coefficients(routing, /*squared=*/false);
}

MixingCoefficients IncoherentCoefficients(const Routing& routing) {
  return Coefficients(routing, /*squared=*/true);
}

long double LogFactorial(uint64_t k) {
  static const std::vector<long double>* const table = [] {
    auto* values = new std::vector<long double>(kLogFactorialTableSize);
    for (uint64_t i = 0; i < kLogFactorialTableSize; ++i) (*values)[i] = LogGamma(i + 1.0L);
    return values;
  }();
  return k < kLogFactorialTableSize ? (*table)[k] : LogGamma(static_cast<long double>(k) + 1.0L);
}

}  // namespace posbias::density
