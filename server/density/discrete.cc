#include "server/density/discrete.h"

#include <algorithm>

#include "server/density/mixing.h"

namespace posbias::density {
namespace {

// Coefficients as doubles over the range of powers that can contribute; zeros elsewhere.
std::vector<double> CoefficientsAsDoubles(const MixingCoefficients& coefficients) {
  std::vector<double> c(coefficients.depth + 1, 0.0);
  for (uint32_t r = coefficients.r_min; r <= coefficients.r_max; ++r) c[r] = coefficients.c(r);
  return c;
}

// One position of the sweep: advances the running suffix sums to j and returns the two profile
// entries there. `s[r]` holds s_r(j+1) on entry and s_r(j) on return.
inline void SweepPosition(uint64_t j, uint64_t length, const double* c, const double* c_tilde,
                          uint32_t powers, double* s, double* coherent, double* incoherent) {
  const double inv_j = 1.0 / static_cast<double>(j);
  double u = j == length ? 1.0 : 0.0;  // u^(0)_j.
  double v = c[0] * u;
  double w = c_tilde[0] * u * u;
  for (uint32_t r = 1; r <= powers; ++r) {
    s[r] += u * inv_j;
    u = s[r];
    v += c[r] * u;
    w += c_tilde[r] * u * u;
  }
  *coherent = v;
  *incoherent = w;
}

}  // namespace

absl::StatusOr<DiscreteProfiles> ComputeDiscreteProfiles(const Routing& routing, uint64_t length,
                                                         const DiscreteOptions& options) {
  const auto coherent = CoherentCoefficients(routing);
  const auto incoherent = IncoherentCoefficients(routing);
  const std::vector<double> c = CoefficientsAsDoubles(coherent);
  const std::vector<double> c_tilde = CoefficientsAsDoubles(incoherent);
  // Powers beyond the last nonzero coefficient change nothing.
  const uint32_t powers = std::max(options.coherent ? coherent.r_max : 0,
                                   options.incoherent ? incoherent.r_max : 0);
  std::vector<double> s(powers + 1, 0.0);
  std::vector<double> v(length), w(length);
  for (uint64_t j = length; j >= 1; --j) {
    SweepPosition(j, length, c.data(), c_tilde.data(), powers, s.data(), &v[j - 1], &w[j - 1]);
    if (options.keep_going && options.check_every_positions > 0 &&
        j % options.check_every_positions == 0 && !options.keep_going()) {
      return absl::CancelledError("discrete profile computation cancelled");
    }
  }
  DiscreteProfiles profiles;
  profiles.length = length;
  if (options.coherent) profiles.coherent = std::move(v);
  if (options.incoherent) profiles.incoherent = std::move(w);
  return profiles;
}

std::vector<std::vector<double>> CesaroRowPowers(uint64_t length, uint32_t max_power) {
  std::vector<std::vector<double>> rows(max_power + 1, std::vector<double>(length, 0.0));
  rows[0][length - 1] = 1.0;
  for (uint32_t r = 1; r <= max_power; ++r) {
    double suffix = 0.0;
    for (uint64_t j = length; j >= 1; --j) {
      suffix += rows[r - 1][j - 1] / static_cast<double>(j);
      rows[r][j - 1] = suffix;
    }
  }
  return rows;
}

}  // namespace posbias::density
