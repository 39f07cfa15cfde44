// The density RPCs as plain functions of (state, caller, request) -> response: validate a request
// against the server's limits, compute with the density room. No gRPC types, so tests call them
// directly; the generated wiring (server/rpc/v1_wiring.h) serves them.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "posbias/v1/density_service.pb.h"
#include "server/limits/limits.h"
#include "server/metrics/metrics.h"
#include "server/api/caller.h"
#include "server/api/v1_handlers.h"

namespace posbias::api {

// Request limits (server flags). Units: points, positions, and layer-positions for work.
struct DensityLimits {
  uint64_t max_points = limits::Default<uint64_t>(limits::Limit::kMaxPoints);
  uint64_t max_discrete_length = limits::Default<uint64_t>(limits::Limit::kMaxDiscreteLength);
  double max_discrete_work = limits::Default<double>(limits::Limit::kMaxDiscreteWork);  // H * L.
  uint64_t max_returned_positions = limits::Default<uint64_t>(limits::Limit::kMaxReturnedPositions);
};

// The service's state: what its handlers (Handle<Method> for each unary RPC of DensityService,
// declared in v1_handlers.h, generated from the proto; defined in
// density_requests.cc) read. EvaluateDiscrete polls Caller::Gone during long
// computations and stops with CANCELLED.
struct DensityRequests {
  DensityLimits limits;
  metrics::Metrics* metrics = nullptr;  // Counts the points evaluated; may be nullptr.
};

}  // namespace posbias::api
