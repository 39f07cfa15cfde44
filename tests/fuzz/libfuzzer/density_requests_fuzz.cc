// libFuzzer harness: every DensityService RPC as the server runs it (api/
// density_requests.h: validate against the limits, compute with the density room, fill the
// response), with no gRPC in between.
//
// Input: byte 0 picks the RPC from the service's descriptor (its methods in the proto's order:
// EvaluateContinuum, EvaluateDiscrete, SummarizeProfile, FitProfile; by value mod their count), so
// a new RPC is drawn from the day it is added and fails here until it has a case; the rest is the
// serialized request (protobuf wire format, as gRPC would hand it over). Bytes that are not a
// message of that type are skipped.
//
// Promises checked: OK with a response whose sizes match the request, or a clean refusal
// (fuzz_check.h). The work per input is bounded the way the server bounds it, with the limits
// (DensityLimits) scaled down so that one input runs in milliseconds; where a request's cost has
// no server limit small enough (continuum points times depth, fits), the harness skips the
// input instead of weakening the server.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "posbias/v1/density_service.pb.h"
#include "server/api/density_requests.h"
#include "tests/fuzz/libfuzzer/fuzz_check.h"

namespace {

namespace v1 = posbias::v1;
using posbias::fuzz::Require;
using posbias::fuzz::RequireCleanRefusal;

posbias::api::DensityLimits FuzzLimits() {
  posbias::api::DensityLimits limits;
  limits.max_points = 4096;
  limits.max_discrete_length = 1 << 16;
  limits.max_discrete_work = 1 << 20;
  limits.max_returned_positions = 4096;
  return limits;
}

// Layers the routing model names (its schedule's length when the depth is 0).
uint64_t Depth(const v1::RoutingModel& model) {
  return std::max<uint64_t>(model.depth(), static_cast<uint64_t>(model.alpha_schedule().alpha_size()));
}

// A handler's answer under the fuzz limits, to a caller who stays.
template <typename Handle, typename Request>
auto Answer(Handle handle, const Request& request) {
  posbias::api::DensityRequests service{FuzzLimits(), nullptr};
  posbias::api::Caller caller;
  return handle(service, caller, request);
}

void Continuum(const std::string& bytes) {
  v1::EvaluateContinuumRequest request;
  if (!request.ParseFromString(bytes)) return;
  const uint64_t points = request.has_grid() ? request.grid().count() : request.point_list().x_size();
  if (std::min<uint64_t>(points, 4096) * Depth(request.model()) > (uint64_t{1} << 22)) return;
  const auto answer = Answer(posbias::api::HandleEvaluateContinuum, request);
  if (!answer.ok()) return RequireCleanRefusal(answer.status(), "EvaluateContinuum");
  const v1::EvaluateContinuumResponse& response = *answer;
  const int n = response.x_size();
  Require(n >= 1, "EvaluateContinuum: no points in an accepted response");
  for (int size : {response.density_size(), response.log_density_size(), response.cdf_size(), response.ccdf_size()}) {
    Require(size == 0 || size == n, "EvaluateContinuum: a column of another length than x");
  }
}

void Discrete(const std::string& bytes) {
  v1::EvaluateDiscreteRequest request;
  if (!request.ParseFromString(bytes)) return;
  const auto answer = Answer(posbias::api::HandleEvaluateDiscrete, request);
  if (!answer.ok()) return RequireCleanRefusal(answer.status(), "EvaluateDiscrete");
  const v1::EvaluateDiscreteResponse& response = *answer;
  const int n = response.position_size();
  Require(response.length() == request.length(), "EvaluateDiscrete: length differs from the request's");
  for (int size : {response.coherent_size(), response.incoherent_size()}) {
    Require(size == 0 || size == n, "EvaluateDiscrete: a column of another length than position");
  }
  for (uint64_t position : response.position()) {
    Require(position >= 1 && position <= request.length(), "EvaluateDiscrete: a position outside 1..L");
  }
}

void Summarize(const std::string& bytes) {
  v1::SummarizeProfileRequest request;
  if (!request.ParseFromString(bytes)) return;
  const auto answer = Answer(posbias::api::HandleSummarizeProfile, request);
  if (!answer.ok()) return RequireCleanRefusal(answer.status(), "SummarizeProfile");
  const v1::SummarizeProfileResponse& response = *answer;
  Require(response.has_summary(), "SummarizeProfile: no summary in an accepted response");
}

void Fit(const std::string& bytes) {
  v1::FitProfileRequest request;
  if (!request.ParseFromString(bytes)) return;
  // Fits have fixed limits (max_depth * L <= 2^24) sized for a server, not for a fuzzer's pace.
  const uint64_t max_depth = request.depth().has_fixed()   ? request.depth().fixed()
                             : request.depth().has_range() ? request.depth().range().max()
                                                           : 24;
  if (max_depth * static_cast<uint64_t>(request.measured().values_size()) > (uint64_t{1} << 16)) return;
  const auto answer = Answer(posbias::api::HandleFitProfile, request);
  if (!answer.ok()) return RequireCleanRefusal(answer.status(), "FitProfile");
  const v1::FitProfileResponse& response = *answer;
  Require(response.fits_size() >= 1, "FitProfile: no fit in an accepted response");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  // Each RPC's case, by method name (the service's methods come from its descriptor).
  static const std::map<std::string, void (*)(const std::string&)> kCases = {
      {"EvaluateContinuum", Continuum}, {"EvaluateDiscrete", Discrete}, {"SummarizeProfile", Summarize},
      {"FitProfile", Fit}};
  static const auto* service = v1::EvaluateContinuumRequest::descriptor()->file()->FindServiceByName("DensityService");
  const auto* method = service->method(data[0] % service->method_count());
  const auto found = kCases.find(method->name());
  Require(found != kCases.end(), "a DensityService RPC without a case in this harness", method->name());
  found->second(bytes);
  return 0;
}
