#include "server/density/windowed.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "server/density/mixing.h"
#include "server/status/error.h"

namespace posbias::density {
namespace {

// A window of w >= L positions (or 0) averages the whole prefix: the full causal matrix.
uint64_t Effective(uint64_t window, uint64_t length) { return window == 0 || window >= length ? length : window; }

}  // namespace

void MultiplyByWindowedCesaro(std::span<const double> u, uint64_t window, std::span<double> out) {
  const uint64_t length = u.size();
  const uint64_t w = Effective(window, length);
  // out_j = sum of t_i = u_i / min(i, w) over the window [j, j + w - 1]. Cut the positions into
  // blocks of w: a window is the rest of its own block plus the start of the next, so out_j =
  // (suffix sum within j's block) + (prefix sum within the next block). Only additions of
  // nonnegative terms, at most w of them: relative error <= about w double epsilons per entry,
  // however small the entry is next to the row's largest (a running sum that adds and drops
  // terms would leave the large terms' rounding in the small entries).
  std::vector<double> suffix(length), prefix(length);
  for (uint64_t i = length; i-- > 0;) {  // 0-based i is position i + 1.
    const double t = u[i] / static_cast<double>(std::min(i + 1, w));
    suffix[i] = (i + 1 < length && (i + 1) % w != 0) ? t + suffix[i + 1] : t;
  }
  for (uint64_t i = 0; i < length; ++i) {
    const double t = u[i] / static_cast<double>(std::min(i + 1, w));
    prefix[i] = (i % w != 0) ? t + prefix[i - 1] : t;
  }
  for (uint64_t i = 0; i < length; ++i) {
    const uint64_t last = std::min(i + w - 1, length - 1);
    const bool spills = i % w != 0 && (i / w + 1) * w < length;  // The window reaches the next block.
    out[i] = spills ? suffix[i] + prefix[last] : suffix[i];
  }
}

std::vector<std::vector<double>> WindowedCesaroRowPowers(uint64_t length, uint32_t max_power, uint64_t window) {
  std::vector<std::vector<double>> rows(max_power + 1, std::vector<double>(length, 0.0));
  rows[0][length - 1] = 1.0;
  for (uint32_t r = 1; r <= max_power; ++r) MultiplyByWindowedCesaro(rows[r - 1], window, rows[r]);
  return rows;
}

absl::StatusOr<DiscreteProfiles> ComputeWindowedProfiles(const Routing& routing, uint64_t length,
                                                         const DiscreteOptions& options) {
  const auto uniform = routing.uniform_window();
  if (options.incoherent && !uniform.has_value()) {
    return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented,
                           "the incoherent profile with layers of different attention windows is a sum over the 2^H "
                           "subsets of layers and is not computed: ask for the coherent profile, or give one "
                           "attention_window for every layer");
  }
  DiscreteProfiles profiles;
  profiles.length = length;
  std::vector<double> scratch(length);
  const std::vector<double> alphas = routing.layer_alphas();
  auto cancelled = [&](uint32_t step) {
    return options.keep_going && options.check_every_positions > 0 &&
           (uint64_t{step} + 1) * length % options.check_every_positions < length && !options.keep_going();
  };
  if (options.coherent) {
    // v = e_L^T N_H ... N_1, applied from the output side: v <- (1 - a_l) v + a_l v M_{w_l}.
    std::vector<double> v(length, 0.0);
    v[length - 1] = 1.0;
    for (uint32_t l = routing.depth(); l >= 1; --l) {
      const double a = alphas[l - 1];
      MultiplyByWindowedCesaro(v, routing.window_of_layer(l), scratch);
      for (uint64_t j = 0; j < length; ++j) v[j] = (1.0 - a) * v[j] + a * scratch[j];
      if (cancelled(l)) return absl::CancelledError("discrete profile computation cancelled");
    }
    profiles.coherent = std::move(v);
  }
  if (options.incoherent) {
    // One matrix M_w: sum_r c~_r (u^(r)_j)^2 with u^(r+1) = u^(r) M_w, one row kept at a time.
    const auto coefficients = IncoherentCoefficients(routing);
    std::vector<double> u(length, 0.0), w(length, 0.0);
    u[length - 1] = 1.0;
    for (uint32_t r = 0; r <= coefficients.r_max; ++r) {
      if (r > 0) {
        MultiplyByWindowedCesaro(u, *uniform, scratch);
        u.swap(scratch);
      }
      if (r < coefficients.r_min) continue;
      const double c = coefficients.c(r);
      for (uint64_t j = 0; j < length; ++j) w[j] += c * u[j] * u[j];
      if (cancelled(r)) return absl::CancelledError("discrete profile computation cancelled");
    }
    profiles.incoherent = std::move(w);
  }
  return profiles;
}

}  // namespace posbias::density
