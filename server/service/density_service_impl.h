// posbias.v1.DensityService over gRPC: each method times the call, delegates to the density room
// through density_requests, converts the status once, records metrics and returns.
#pragma once

#include "posbias/v1/density_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/service/density_requests.h"

namespace posbias::service {

class DensityServiceImpl final : public v1::DensityService::Service {
 public:
  DensityServiceImpl(const DensityLimits& limits, metrics::Metrics* metrics)
      : limits_(limits), metrics_(metrics) {}

  grpc::Status EvaluateContinuum(grpc::ServerContext* context,
                                 const v1::EvaluateContinuumRequest* request,
                                 v1::EvaluateContinuumResponse* response) override;
  grpc::Status EvaluateDiscrete(grpc::ServerContext* context,
                                const v1::EvaluateDiscreteRequest* request,
                                v1::EvaluateDiscreteResponse* response) override;
  grpc::Status SummarizeProfile(grpc::ServerContext* context,
                                const v1::SummarizeProfileRequest* request,
                                v1::SummarizeProfileResponse* response) override;
  grpc::Status FitProfile(grpc::ServerContext* context, const v1::FitProfileRequest* request,
                          v1::FitProfileResponse* response) override;

 private:
  DensityLimits limits_;
  metrics::Metrics* metrics_;
};

}  // namespace posbias::service
