// Per-position loss weights (position_weights.h).
#include "server/train/position_weights.h"

#include <cmath>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/density/discrete.h"
#include "server/density/routing.h"
#include "server/status/error.h"

namespace posbias::train {
namespace {

absl::Status FlagError(const std::string& flag, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, flag, value, allowed});
}

// rho_t = (e_L^T N^H)_t, t = 1..L: the coherent discrete profile (density/discrete.h).
absl::StatusOr<std::vector<double>> RoutingRow(int64_t length, int64_t layers, double alpha) {
  auto routing = density::MakeRouting(static_cast<uint32_t>(layers), alpha);
  if (!routing.ok()) return routing.status();
  density::DiscreteOptions options;
  options.incoherent = false;
  auto profiles = density::ComputeDiscreteProfiles(*routing, static_cast<uint64_t>(length), options);
  if (!profiles.ok()) return profiles.status();
  return std::move(profiles->coherent);
}

void NormalizeToMeanOne(std::vector<double>& weights) {
  const double sum = std::accumulate(weights.begin(), weights.end(), 0.0);
  for (double& w : weights) w *= static_cast<double>(weights.size()) / sum;
}

}  // namespace

std::string PositionWeightingName(PositionWeighting weighting) {
  return weighting == PositionWeighting::kInverseRho ? "inverse-rho" : "none";
}

absl::StatusOr<PositionWeighting> ParsePositionWeighting(const std::string& name) {
  if (name == "none") return PositionWeighting::kNone;
  if (name == "inverse-rho") return PositionWeighting::kInverseRho;
  return FlagError("--position-weighting", name, "none or inverse-rho");
}

absl::Status ValidatePositionWeightOptions(const PositionWeightOptions& options) {
  if (!(options.rho_alpha > 0.0 && options.rho_alpha <= 1.0)) {
    return FlagError("--rho-alpha", FormatValue(options.rho_alpha), "(0, 1]");
  }
  if (!(options.middle_oversampling >= 1.0 && std::isfinite(options.middle_oversampling))) {
    return FlagError("--middle-oversampling", FormatValue(options.middle_oversampling), "a finite number >= 1");
  }
  if (!options.explicit_weights.empty() && options.weighting != PositionWeighting::kNone) {
    return FlagError("--position-weights", "a file", "either --position-weights or --position-weighting inverse-rho, not both");
  }
  double sum = 0;
  for (size_t i = 0; i < options.explicit_weights.size(); ++i) {
    const double w = options.explicit_weights[i];
    if (!(w >= 0.0 && std::isfinite(w))) {
      return FlagError(absl::StrCat("--position-weights[", i, "]"), FormatValue(w), "a finite number >= 0");
    }
    sum += w;
  }
  if (!options.explicit_weights.empty() && !(sum > 0)) {
    return FlagError("--position-weights", "all zero", "at least one positive weight");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<double>> PositionLossWeights(const PositionWeightOptions& options, int64_t length,
                                                        int64_t layers) {
  if (auto status = ValidatePositionWeightOptions(options); !status.ok()) return status;
  std::vector<double> weights(static_cast<size_t>(length), 1.0);
  if (!options.explicit_weights.empty()) {
    if (static_cast<int64_t>(options.explicit_weights.size()) != length) {
      return FlagError("--position-weights", absl::StrCat(options.explicit_weights.size(), " numbers"),
                       absl::StrCat("exactly --length = ", length, " numbers"));
    }
    weights = options.explicit_weights;
  } else if (options.weighting == PositionWeighting::kInverseRho) {
    auto row = RoutingRow(length, layers, options.rho_alpha);
    if (!row.ok()) return row.status();
    for (int64_t t = 0; t < length; ++t) weights[t] = 1.0 / (*row)[t];
  }
  NormalizeToMeanOne(weights);
  if (options.middle_oversampling != 1.0) {
    const int64_t edge = length / 10;
    for (int64_t t = edge; t < length - edge; ++t) weights[t] *= options.middle_oversampling;
    NormalizeToMeanOne(weights);
  }
  return weights;
}

absl::StatusOr<std::vector<double>> ReadPositionWeightsFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError("--position-weights: cannot read " + path);
  const auto json = nlohmann::json::parse(in, nullptr, false);
  if (json.is_discarded() || !json.is_array()) {
    return FlagError("--position-weights", path, "a file holding a JSON list of numbers");
  }
  std::vector<double> weights;
  for (const auto& item : json) {
    if (!item.is_number()) return FlagError("--position-weights", path, "a file holding a JSON list of numbers");
    weights.push_back(item.get<double>());
  }
  return weights;
}

}  // namespace posbias::train
