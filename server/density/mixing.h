// Mixing coefficients of the routing polynomial (THEORY.md sections 1 and 5).
//
//   prod_l ((1 - a_l) + a_l z) = sum_r c_r z^r                 (coherent: R ~ Poisson-binomial)
//   prod_l ((1 - a_l)^2 + a_l^2 z) = sum_r c~_r z^r            (incoherent, random value maps)
//
// Stored as natural logarithms in long double (80-bit on x86-64), so that H in the thousands and
// alpha near 0 or 1 neither underflow nor lose digits. Both sequences are log-concave in r (their
// generating polynomials have real roots), which the continuum sums rely on. The support
// [r_min, r_max] is where c_r > 0; outside it log_c is -infinity.
#pragma once

#include <cstdint>
#include <vector>

#include "server/density/routing.h"

namespace posbias::density {

struct MixingCoefficients {
  uint32_t depth = 0;
  std::vector<long double> log_c;  // r = 0..H.
  uint32_t r_min = 0;
  uint32_t r_max = 0;

  double c(uint32_t r) const;  // exp(log_c[r]) rounded to double (0 outside the support).
};

// c_r: for constant alpha the binomial closed form, C(H, r) (1 - alpha)^(H - r) alpha^r; for a
// schedule the O(H^2) product expansion.
MixingCoefficients CoherentCoefficients(const Routing& routing);

// c~_r: the same with a_l^2 and (1 - a_l)^2 (not normalized: sum_r c~_r = prod_l (a_l^2 + (1-a_l)^2)).
MixingCoefficients IncoherentCoefficients(const Routing& routing);

// ln k! for k >= 0, from a table shared by all threads (computed once, up to 2^17) or lgammal.
long double LogFactorial(uint64_t k);

}  // namespace posbias::density
