#include "server/service/density_service_impl.h"

#include "server/service/rpc_scope.h"

namespace posbias::service {
namespace {
constexpr char kPrefix[] = "/posbias.v1.DensityService/";
}  // namespace

grpc::Status DensityServiceImpl::EvaluateContinuum(grpc::ServerContext* context,
                                                   const v1::EvaluateContinuumRequest* request,
                                                   v1::EvaluateContinuumResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "EvaluateContinuum");
  const absl::Status status = HandleEvaluateContinuum(*request, limits_, response);
  if (status.ok() && metrics_) metrics_->AddPointsEvaluated("continuum", response->x_size());
  return scope.Finish(status, context);
}

grpc::Status DensityServiceImpl::EvaluateDiscrete(grpc::ServerContext* context,
                                                  const v1::EvaluateDiscreteRequest* request,
                                                  v1::EvaluateDiscreteResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "EvaluateDiscrete");
  const absl::Status status =
      HandleEvaluateDiscrete(*request, limits_, [context] { return !context->IsCancelled(); },
                             response);
  if (status.ok() && metrics_) {
    metrics_->AddPointsEvaluated("discrete", static_cast<double>(response->length()));
  }
  return scope.Finish(status, context);
}

grpc::Status DensityServiceImpl::SummarizeProfile(grpc::ServerContext* context,
                                                  const v1::SummarizeProfileRequest* request,
                                                  v1::SummarizeProfileResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "SummarizeProfile");
  return scope.Finish(HandleSummarizeProfile(*request, limits_, response), context);
}

grpc::Status DensityServiceImpl::FitProfile(grpc::ServerContext* context,
                                            const v1::FitProfileRequest* request,
                                            v1::FitProfileResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "FitProfile");
  return scope.Finish(HandleFitProfile(*request, response), context);
}

}  // namespace posbias::service
