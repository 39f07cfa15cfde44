// posbias.v1.DensityService over gRPC's callback API: each method hands its work (the density room,
// through density_requests) to the call executor, which converts the status once and records the
// metrics; no gRPC thread waits on the work.
#pragma once

#include "posbias/v1/density_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/call_auth.h"
#include "server/service/call_executor.h"
#include "server/service/density_requests.h"

namespace posbias::service {

class DensityServiceImpl final : public v1::DensityService::CallbackService {
 public:
  DensityServiceImpl(const DensityLimits& limits, metrics::Metrics* metrics)
      : limits_(limits), metrics_(metrics) {}
  // Where the calls' work runs (set before the server starts).
  void Start(CallExecutor* executor, const CallAuth* auth) {
    executor_ = executor;
    auth_ = auth;
  }

  grpc::ServerUnaryReactor* EvaluateContinuum(grpc::CallbackServerContext* context,
                                              const v1::EvaluateContinuumRequest* request,
                                              v1::EvaluateContinuumResponse* response) override;
  grpc::ServerUnaryReactor* EvaluateDiscrete(grpc::CallbackServerContext* context,
                                             const v1::EvaluateDiscreteRequest* request,
                                             v1::EvaluateDiscreteResponse* response) override;
  grpc::ServerUnaryReactor* SummarizeProfile(grpc::CallbackServerContext* context,
                                             const v1::SummarizeProfileRequest* request,
                                             v1::SummarizeProfileResponse* response) override;
  grpc::ServerUnaryReactor* FitProfile(grpc::CallbackServerContext* context, const v1::FitProfileRequest* request,
                                       v1::FitProfileResponse* response) override;

 private:
  DensityLimits limits_;
  metrics::Metrics* metrics_;
  CallExecutor* executor_ = nullptr;
  const CallAuth* auth_ = nullptr;
};

}  // namespace posbias::service
