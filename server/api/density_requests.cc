#include "server/api/density_requests.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/density/continuum.h"
#include "server/density/discrete.h"
#include "server/density/fit.h"
#include "server/density/summary.h"
#include "server/api/density_convert.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

struct ContinuumWanted {
  bool density = false, log_density = false, cdf = false, ccdf = false;
};

absl::StatusOr<ContinuumWanted> WantedQuantities(const v1::EvaluateContinuumRequest& request) {
  if (request.quantities().empty()) return ContinuumWanted{true, true, true, true};
  ContinuumWanted wanted;
  for (int i = 0; i < request.quantities_size(); ++i) {
    switch (request.quantities(i)) {
      case v1::DENSITY: wanted.density = true; break;
      case v1::LOG_DENSITY: wanted.log_density = true; break;
      case v1::CDF: wanted.cdf = true; break;
      case v1::CCDF: wanted.ccdf = true; break;
      default:
        return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("quantities[", i, "]"),
                                     std::to_string(request.quantities(i)),
                                     "DENSITY, LOG_DENSITY, CDF or CCDF"});
    }
  }
  return wanted;
}

absl::StatusOr<std::vector<double>> GridPoints(const v1::Grid& grid, uint64_t max_points) {
  if (grid.count() == 0) {
    return InvalidArgumentError({ErrorReason::kEmptyRequest, "grid.count", "0",
                                 limits::Range(limits::Limit::kMaxPoints, 1, static_cast<double>(max_points))});
  }
  if (grid.count() > max_points) {
    return TooLargeError("grid.count", std::to_string(grid.count()), limits::Allowed(limits::Limit::kMaxPoints, max_points));
  }
  if (auto status = density::CheckPoint(grid.start(), "grid.start"); !status.ok()) return status;
  if (auto status = density::CheckPoint(grid.stop(), "grid.stop"); !status.ok()) return status;
  if (grid.start() > grid.stop()) {
    return InvalidArgumentError({ErrorReason::kInvalidPoint, "grid.stop", FormatValue(grid.stop()),
                                 absl::StrCat("[grid.start = ", FormatValue(grid.start()), ", 1]")});
  }
  std::vector<double> x(grid.count());
  const bool linear = grid.spacing() == v1::LINEAR;
  const double a = linear ? grid.start() : std::log(grid.start());
  const double b = linear ? grid.stop() : std::log(grid.stop());
  for (uint32_t i = 0; i < grid.count(); ++i) {
    const double u = grid.count() == 1 ? 0.0 : static_cast<double>(i) / (grid.count() - 1);
    const double value = a + (b - a) * u;
    x[i] = i + 1 == grid.count() ? grid.stop() : (linear ? value : std::exp(value));
  }
  x[0] = grid.start();
  return x;
}

absl::StatusOr<std::vector<double>> ContinuumPoints(const v1::EvaluateContinuumRequest& request,
                                                    uint64_t max_points) {
  if (request.has_grid()) return GridPoints(request.grid(), max_points);
  const auto& given = request.point_list().x();
  if (given.empty()) {
    return InvalidArgumentError({ErrorReason::kEmptyRequest, "point_list.x", "no points",
                                 absl::StrCat("1..", max_points, " points, or a grid")});
  }
  if (static_cast<uint64_t>(given.size()) > max_points) {
    return TooLargeError("point_list.x", absl::StrCat(given.size(), " points"),
                         limits::Allowed(limits::Limit::kMaxPoints, max_points));
  }
  for (int i = 0; i < given.size(); ++i) {
    if (auto status = density::CheckPoint(given[i], absl::StrCat("point_list.x[", i, "]"));
        !status.ok()) {
      return status;
    }
  }
  return std::vector<double>(given.begin(), given.end());
}

absl::Status CheckLength(uint64_t length, const DensityLimits& limits, const std::string& field) {
  if (length == 0) {
    return InvalidArgumentError({ErrorReason::kInvalidLength, field, "0",
                                 limits::Range(limits::Limit::kMaxDiscreteLength, 1,
                                               static_cast<double>(limits.max_discrete_length))});
  }
  if (length > limits.max_discrete_length) {
    return TooLargeError(field, std::to_string(length),
                         limits::Allowed(limits::Limit::kMaxDiscreteLength, limits.max_discrete_length));
  }
  return absl::OkStatus();
}

// A windowed layer's product (block prefix and suffix sums, then a combining pass) costs about
// 14 times a step of the full-causal sweep (measured: H = 1000, L = 1e5 took 1.9 s against
// 0.14 s), so its work counts 16 times: the work limit bounds a call's time either way.
constexpr double kWindowedWorkFactor = 16;

absl::Status CheckWork(const density::Routing& routing, uint64_t length, const DensityLimits& limits) {
  const double factor = routing.windowed() ? kWindowedWorkFactor : 1.0;
  const double work = factor * static_cast<double>(routing.depth()) * static_cast<double>(length);
  if (work <= limits.max_discrete_work) return absl::OkStatus();
  return TooLargeError(routing.windowed() ? "16 * depth * length (windowed attention)" : "depth * length",
                       FormatValue(work), limits::Allowed(limits::Limit::kMaxDiscreteWork, limits.max_discrete_work));
}

// The selected positions (1-based), or all of 1..L when nothing is selected.
absl::StatusOr<std::vector<uint64_t>> SelectedPositions(const v1::EvaluateDiscreteRequest& request,
                                                        uint64_t length) {
  std::vector<uint64_t> positions;
  if (request.has_positions()) {
    const auto& given = request.positions().position();
    for (int i = 0; i < given.size(); ++i) {
      if (given[i] < 1 || given[i] > length) {
        return InvalidArgumentError({ErrorReason::kInvalidPosition, absl::StrCat("positions.position[", i, "]"),
                                     std::to_string(given[i]), absl::StrCat("1..", length)});
      }
    }
    return std::vector<uint64_t>(given.begin(), given.end());
  }
  const auto& stride = request.stride();
  const uint64_t start = stride.start() == 0 ? 1 : stride.start();
  const uint64_t stop = stride.stop() == 0 ? length : stride.stop();
  const uint64_t step = stride.step() == 0 ? 1 : stride.step();
  if (start > length || stop > length || start > stop) {
    return InvalidArgumentError(
        {ErrorReason::kInvalidPosition, "stride", absl::StrCat("start ", start, ", stop ", stop),
         absl::StrCat("1 <= start <= stop <= L = ", length)});
  }
  // start + i * step <= stop for every i below the count: no arithmetic can wrap around.
  const uint64_t count = (stop - start) / step + 1;
  positions.reserve(count);
  for (uint64_t i = 0; i < count; ++i) positions.push_back(start + i * step);
  return positions;
}

uint64_t SelectedCount(const v1::EvaluateDiscreteRequest& request, uint64_t length) {
  if (request.has_positions()) return request.positions().position_size();
  const auto& stride = request.stride();
  const uint64_t start = stride.start() == 0 ? 1 : stride.start();
  const uint64_t stop = stride.stop() == 0 ? length : std::min(stride.stop(), length);
  const uint64_t step = stride.step() == 0 ? 1 : stride.step();
  return stop >= start ? (stop - start) / step + 1 : 0;
}

absl::Status EvaluateContinuum(const v1::EvaluateContinuumRequest& request, const DensityLimits& limits,
                                     v1::EvaluateContinuumResponse* response) {
  auto routing = RoutingFromProto(request.model());
  if (!routing.ok()) return routing.status();
  if (routing->windowed()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "model.attention_window", "set",
                                 "0 and no layer_windows: a fixed window has no continuum limit (its influence "
                                 "reaches back at most H * (w - 1) positions); use EvaluateDiscrete"});
  }
  auto wanted = WantedQuantities(request);
  if (!wanted.ok()) return wanted.status();
  auto points = ContinuumPoints(request, limits.max_points);
  if (!points.ok()) return points.status();
  const density::ContinuumProfile profile(*routing);
  const std::vector<double>& x = *points;
  const size_t n = x.size();
  response->mutable_x()->Add(x.begin(), x.end());
  if (wanted->density || wanted->log_density) {
    std::vector<double> density(n), log_density(n);
    profile.EvaluateDensity(x, density, log_density);
    if (wanted->density) response->mutable_density()->Add(density.begin(), density.end());
    if (wanted->log_density) response->mutable_log_density()->Add(log_density.begin(), log_density.end());
  }
  for (size_t i = 0; wanted->cdf && i < n; ++i) response->add_cdf(profile.Cdf(x[i]));
  for (size_t i = 0; wanted->ccdf && i < n; ++i) response->add_ccdf(profile.Ccdf(x[i]));
  response->set_atom(profile.atom());
  response->set_floor(profile.floor());
  response->set_depth(profile.depth());
  return absl::OkStatus();
}

absl::Status EvaluateDiscrete(const v1::EvaluateDiscreteRequest& request,
                                    const DensityLimits& limits,
                                    const std::function<bool()>& keep_going,
                                    v1::EvaluateDiscreteResponse* response) {
  auto routing = RoutingFromProto(request.model());
  if (!routing.ok()) return routing.status();
  const uint64_t length = request.length();
  if (auto status = CheckLength(length, limits, "length"); !status.ok()) return status;
  if (auto status = CheckWork(*routing, length, limits); !status.ok()) return status;
  if (!request.summaries_only() && SelectedCount(request, length) > limits.max_returned_positions) {
    return TooLargeError("returned positions", std::to_string(SelectedCount(request, length)),
                         absl::StrCat(limits::Allowed(limits::Limit::kMaxReturnedPositions, limits.max_returned_positions),
                                      "; use a stride, a position list or summaries_only"));
  }
  auto models = ModelsFromProto(request.profiles(), "profiles");
  if (!models.ok()) return models.status();
  auto summary_options = SummaryOptionsFromProto(request.summary_options(), length);
  if (!summary_options.ok()) return summary_options.status();
  auto positions = request.summaries_only() ? std::vector<uint64_t>{}
                                            : SelectedPositions(request, length);
  if (!positions.ok()) return positions.status();
  density::DiscreteOptions options;
  options.coherent = options.incoherent = false;
  for (auto model : *models) (model == density::Model::kCoherent ? options.coherent : options.incoherent) = true;
  options.keep_going = keep_going;
  auto profiles = density::ComputeDiscreteProfiles(*routing, length, options);
  if (!profiles.ok()) return profiles.status();
  response->set_depth(routing->depth());
  response->set_length(length);
  response->mutable_position()->Add(positions->begin(), positions->end());
  for (uint64_t j : *positions) {
    if (options.coherent) response->add_coherent(profiles->coherent[j - 1]);
    if (options.incoherent) response->add_incoherent(profiles->incoherent[j - 1]);
  }
  if (options.coherent) {
    SummaryToProto(density::SummarizeValues(profiles->coherent, *summary_options),
                   response->mutable_coherent_summary());
  }
  if (options.incoherent) {
    SummaryToProto(density::SummarizeValues(profiles->incoherent, *summary_options),
                   response->mutable_incoherent_summary());
  }
  return absl::OkStatus();
}

absl::Status SummarizeProfile(const v1::SummarizeProfileRequest& request,
                                    const DensityLimits& limits,
                                    v1::SummarizeProfileResponse* response) {
  if (request.has_measured()) {
    const auto& values = request.measured().values();
    if (values.empty()) {
      return InvalidArgumentError({ErrorReason::kEmptyRequest, "measured.values", "no values",
                                   absl::StrCat("1..", limits.max_discrete_length, " values")});
    }
    if (auto status = CheckLength(values.size(), limits, "measured.values"); !status.ok()) return status;
    if (auto status = density::CheckProfileValues({values.data(), static_cast<size_t>(values.size())},
                                                  "measured.values");
        !status.ok()) {
      return status;
    }
    auto options = SummaryOptionsFromProto(request.options(), values.size());
    if (!options.ok()) return options.status();
    SummaryToProto(density::SummarizeValues({values.data(), static_cast<size_t>(values.size())}, *options),
                   response->mutable_summary());
    return absl::OkStatus();
  }
  if (!request.has_theory()) {
    return InvalidArgumentError({ErrorReason::kEmptyRequest, "source", "not set", "theory or measured"});
  }
  const auto& theory = request.theory();
  auto routing = RoutingFromProto(theory.model());
  if (!routing.ok()) return routing.status();
  auto options = SummaryOptionsFromProto(request.options(), theory.length());
  if (!options.ok()) return options.status();
  if (theory.length() == 0) {
    if (routing->windowed()) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "theory.length", "0 (the continuum)",
                                   "a length >= 1 with attention windows: a fixed window has no continuum limit"});
    }
    SummaryToProto(density::SummarizeContinuum(density::ContinuumProfile(*routing), *options),
                   response->mutable_summary());
    return absl::OkStatus();
  }
  if (auto status = CheckLength(theory.length(), limits, "theory.length"); !status.ok()) return status;
  if (auto status = CheckWork(*routing, theory.length(), limits); !status.ok()) return status;
  const bool incoherent = theory.profile() == v1::INCOHERENT;
  density::DiscreteOptions discrete;
  discrete.coherent = !incoherent;
  discrete.incoherent = incoherent;
  auto profiles = density::ComputeDiscreteProfiles(*routing, theory.length(), discrete);
  if (!profiles.ok()) return profiles.status();
  SummaryToProto(density::SummarizeValues(incoherent ? profiles->incoherent : profiles->coherent, *options),
                 response->mutable_summary());
  return absl::OkStatus();
}

absl::Status FitProfile(const v1::FitProfileRequest& request,
                              v1::FitProfileResponse* response) {
  auto options = FitOptionsFromProto(request);
  if (!options.ok()) return options.status();
  const auto& values = request.measured().values();
  const std::span<const double> measured(values.data(), static_cast<size_t>(values.size()));
  auto fits = density::FitProfile(measured, *options);
  if (!fits.ok()) return fits.status();
  for (const auto& fit : *fits) ModelFitToProto(fit, response->add_fits());
  SummaryToProto(density::SummarizeValues(measured, density::SummaryOptions{}),
                 response->mutable_measured_summary());
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::EvaluateContinuumResponse> HandleEvaluateContinuum(DensityRequests& service, Caller&,
                                                                      const v1::EvaluateContinuumRequest& request) {
  v1::EvaluateContinuumResponse response;
  if (auto status = EvaluateContinuum(request, service.limits, &response); !status.ok()) return status;
  if (service.metrics != nullptr) service.metrics->AddPointsEvaluated("continuum", response.x_size());
  return response;
}

absl::StatusOr<v1::EvaluateDiscreteResponse> HandleEvaluateDiscrete(DensityRequests& service, Caller& caller,
                                                                    const v1::EvaluateDiscreteRequest& request) {
  v1::EvaluateDiscreteResponse response;
  const absl::Status status =
      EvaluateDiscrete(request, service.limits, [&caller] { return !caller.Gone(); }, &response);
  if (!status.ok()) return status;
  if (service.metrics != nullptr) {
    service.metrics->AddPointsEvaluated("discrete", static_cast<double>(response.length()));
  }
  return response;
}

absl::StatusOr<v1::SummarizeProfileResponse> HandleSummarizeProfile(DensityRequests& service, Caller&,
                                                                    const v1::SummarizeProfileRequest& request) {
  v1::SummarizeProfileResponse response;
  if (auto status = SummarizeProfile(request, service.limits, &response); !status.ok()) return status;
  return response;
}

absl::StatusOr<v1::FitProfileResponse> HandleFitProfile(DensityRequests&, Caller&, const v1::FitProfileRequest& request) {
  v1::FitProfileResponse response;
  if (auto status = FitProfile(request, &response); !status.ok()) return status;
  return response;
}

}  // namespace posbias::api
