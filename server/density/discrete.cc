#include "server/density/discrete.h"

#include <algorithm>

#include "server/density/mixing.h"
#include "server/density/windowed.h"

namespace posbias::density {
namespace {

// Coefficients as doubles over the range of powers that can contribute; zeros elsewhere.
std::vector<double> CoefficientsAsDoubles(const MixingCoefficients& coefficients) {
  std::vector<double> c(coefficients.depth + 1, 0.0);
  for (uint32_t r = coefficients.r_min; r <= coefficients.r_max; ++r) c[r] = coefficients.c(r);
  return c;
}

// Sweeps positions j = hi, hi - 1, ..., lo + 1 (hi - lo a multiple of kUnroll or the rest at the
// start). `s[r]` holds s_r(hi + 1) on entry and s_r(lo + 1) on return. Eight positions advance
// together: their chains through r overlap, so the processor is not waiting on one long chain of
// dependent additions per position. Each profile is only computed when wanted.
constexpr uint64_t kUnroll = 8;

template <bool kCoherent, bool kIncoherent, uint64_t kCount>
[[gnu::always_inline]] inline void SweepPositions(uint64_t hi, uint64_t length, const double* c, const double* c_tilde,
                           uint32_t powers, double* s, double* coherent, double* incoherent) {
  double inv[kCount], u[kCount], v[kCount], w[kCount];
  for (uint64_t i = 0; i < kCount; ++i) {
    const uint64_t j = hi - i;
    inv[i] = 1.0 / static_cast<double>(j);
    u[i] = j == length ? 1.0 : 0.0;  // u^(0)_j.
    v[i] = c[0] * u[i];
    w[i] = c_tilde[0] * u[i] * u[i];
  }
  for (uint32_t r = 1; r <= powers; ++r) {
    double running = s[r];
    for (uint64_t i = 0; i < kCount; ++i) {
      running += u[i] * inv[i];  // s_r(j) = s_r(j + 1) + u^(r-1)_j / j.
      u[i] = running;
      if constexpr (kCoherent) v[i] += c[r] * u[i];
      if constexpr (kIncoherent) w[i] += c_tilde[r] * u[i] * u[i];
    }
    s[r] = running;
  }
  for (uint64_t i = 0; i < kCount; ++i) {
    if constexpr (kCoherent) coherent[hi - i - 1] = v[i];
    if constexpr (kIncoherent) incoherent[hi - i - 1] = w[i];
  }
}

template <bool kCoherent, bool kIncoherent>
[[gnu::always_inline]] inline bool Sweep(uint64_t length, const double* c, const double* c_tilde, uint32_t powers, double* s,
           double* coherent, double* incoherent, const DiscreteOptions& options) {
  uint64_t j = length;
  for (; j % kUnroll != 0; --j) {
    SweepPositions<kCoherent, kIncoherent, 1>(j, length, c, c_tilde, powers, s, coherent, incoherent);
  }
  uint64_t next_check = options.check_every_positions;
  for (; j >= kUnroll; j -= kUnroll) {
    SweepPositions<kCoherent, kIncoherent, kUnroll>(j, length, c, c_tilde, powers, s, coherent,
                                                    incoherent);
    if (options.keep_going && next_check > 0 && length - j + kUnroll >= next_check) {
      if (!options.keep_going()) return false;
      next_check += options.check_every_positions;
    }
  }
  return true;
}

// The sweep compiled twice on x86-64: for the baseline and for CPUs with AVX2 and FMA (fused
// multiply-adds halve the instruction count); the loader picks one at start-up. Not under the
// sanitizers: their runtime is not ready when the loader runs the ifunc resolver.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && \
    !defined(__SANITIZE_THREAD__) && !defined(__SANITIZE_ADDRESS__)
#define POSBIAS_CLONES [[gnu::target_clones("arch=x86-64-v3", "default")]]
#else
#define POSBIAS_CLONES
#endif

POSBIAS_CLONES bool SweepBoth(uint64_t length, const double* c, const double* c_tilde,
                              uint32_t powers, double* s, double* coherent, double* incoherent,
                              const DiscreteOptions& options) {
  return Sweep<true, true>(length, c, c_tilde, powers, s, coherent, incoherent, options);
}

POSBIAS_CLONES bool SweepCoherent(uint64_t length, const double* c, const double* c_tilde,
                                  uint32_t powers, double* s, double* coherent, double* incoherent,
                                  const DiscreteOptions& options) {
  return Sweep<true, false>(length, c, c_tilde, powers, s, coherent, incoherent, options);
}

POSBIAS_CLONES bool SweepIncoherent(uint64_t length, const double* c, const double* c_tilde,
                                    uint32_t powers, double* s, double* coherent,
                                    double* incoherent, const DiscreteOptions& options) {
  return Sweep<false, true>(length, c, c_tilde, powers, s, coherent, incoherent, options);
}

}  // namespace

absl::StatusOr<DiscreteProfiles> ComputeDiscreteProfiles(const Routing& routing, uint64_t length,
                                                         const DiscreteOptions& options) {
  if (routing.windowed()) return ComputeWindowedProfiles(routing, length, options);
  const auto coherent = CoherentCoefficients(routing);
  const auto incoherent = IncoherentCoefficients(routing);
  const std::vector<double> c = CoefficientsAsDoubles(coherent);
  const std::vector<double> c_tilde = CoefficientsAsDoubles(incoherent);
  // Powers beyond the last nonzero coefficient change nothing.
  const uint32_t powers = std::max(options.coherent ? coherent.r_max : 0,
                                   options.incoherent ? incoherent.r_max : 0);
  std::vector<double> s(powers + 1, 0.0);
  std::vector<double> v(options.coherent ? length : 0), w(options.incoherent ? length : 0);
  const auto sweep = options.coherent ? (options.incoherent ? SweepBoth : SweepCoherent)
                                      : SweepIncoherent;
  if (!sweep(length, c.data(), c_tilde.data(), powers, s.data(), v.data(), w.data(), options)) {
    return absl::CancelledError("discrete profile computation cancelled");
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
