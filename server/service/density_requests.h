// The density RPCs as plain functions: validate a request against the server's limits, compute with
// the density room, fill the response. No gRPC types, so tests can call them directly.
#pragma once

#include <cstdint>
#include <functional>

#include "absl/status/status.h"
#include "posbias/v1/density_service.pb.h"
#include "server/limits/limits.h"

namespace posbias::service {

// Request limits (server flags). Units: points, positions, and layer-positions for work.
struct DensityLimits {
  uint64_t max_points = limits::Default<uint64_t>(limits::Limit::kMaxPoints);
  uint64_t max_discrete_length = limits::Default<uint64_t>(limits::Limit::kMaxDiscreteLength);
  double max_discrete_work = limits::Default<double>(limits::Limit::kMaxDiscreteWork);  // H * L.
  uint64_t max_returned_positions = limits::Default<uint64_t>(limits::Limit::kMaxReturnedPositions);
};

absl::Status HandleEvaluateContinuum(const v1::EvaluateContinuumRequest& request,
                                     const DensityLimits& limits,
                                     v1::EvaluateContinuumResponse* response);

// `keep_going` is polled during long computations; false cancels (the client went away).
absl::Status HandleEvaluateDiscrete(const v1::EvaluateDiscreteRequest& request,
                                    const DensityLimits& limits,
                                    const std::function<bool()>& keep_going,
                                    v1::EvaluateDiscreteResponse* response);

absl::Status HandleSummarizeProfile(const v1::SummarizeProfileRequest& request,
                                    const DensityLimits& limits,
                                    v1::SummarizeProfileResponse* response);

absl::Status HandleFitProfile(const v1::FitProfileRequest& request,
                              v1::FitProfileResponse* response);

}  // namespace posbias::service
