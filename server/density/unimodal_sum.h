// Summation of positive log-concave sequences, anchored in log space.
//
// Every closed form of the density room is a sum of positive terms a_k whose logarithm is concave in
// k (products and convolutions of Poisson, binomial and Gamma weights). Such a sum is evaluated
// without overflow or cancellation by (1) locating the largest term by bisection on the ratio
// a_{k+1}/a_k, which decreases in k, (2) computing only that term in long-double log space, and
// (3) walking outward with the ratios in double until the remaining tail is below 2^-64 of the sum.
// The result is ln(sum), accurate to a few units of the double epsilon relative to the sum.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>

namespace posbias::density {

// Bisection for the first k in [lo, hi) with ratio(k) < 1, i.e. the mode of a log-concave sequence.
template <typename Ratio>
uint64_t ModeOfLogConcave(uint64_t lo, uint64_t hi, const Ratio& ratio) {
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (ratio(mid) >= 1.0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return lo;
}

// ln sum_{k=lo..hi} a_k, given log_term(k) = ln a_k (long double) and ratio(k) = a_{k+1}/a_k.
// Requires a_k > 0 on [lo, hi]. Terms below 2^-64 of the running sum past a point where the ratio
// is below 1/2 (so the rest is a geometric tail bounded by the last term) are not added.
template <typename LogTerm, typename Ratio>
long double LogSumLogConcave(uint64_t lo, uint64_t hi, const LogTerm& log_term,
                             const Ratio& ratio) {
  constexpr double kNegligible = 0x1p-64;
  const uint64_t mode = ModeOfLogConcave(lo, hi, ratio);
  double sum = 1.0;
  double term = 1.0;
  for (uint64_t k = mode; k < hi; ++k) {  // a_{k+1} = a_k * ratio(k).
    const double r = ratio(k);
    term *= r;
    sum += term;
    if (term < kNegligible * sum && r < 0.5) break;
  }
  term = 1.0;
  for (uint64_t k = mode; k > lo; --k) {  // a_{k-1} = a_k / ratio(k-1).
    const double r = ratio(k - 1);
    term /= r;
    sum += term;
    if (term < kNegligible * sum && r > 2.0) break;
  }
  return log_term(mode) + std::log(static_cast<long double>(sum));
}

// ln(e^a + e^b) in long double, exact for infinite arguments.
inline long double LogAddExp(long double a, long double b) {
  if (a < b) std::swap(a, b);
  if (b == -std::numeric_limits<long double>::infinity()) return a;
  return a + std::log1p(std::exp(b - a));
}

}  // namespace posbias::density
