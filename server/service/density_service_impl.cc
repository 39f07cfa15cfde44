#include "server/service/density_service_impl.h"

#include "server/service/unary_call.h"

namespace posbias::service {
namespace {
}  // namespace

grpc::ServerUnaryReactor* DensityServiceImpl::EvaluateContinuum(grpc::CallbackServerContext* context,
                                                                const v1::EvaluateContinuumRequest* request,
                                                                v1::EvaluateContinuumResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=, this] {
    const absl::Status status = HandleEvaluateContinuum(*request, limits_, response);
    if (status.ok() && metrics_) metrics_->AddPointsEvaluated("continuum", response->x_size());
    return status;
  });
}

grpc::ServerUnaryReactor* DensityServiceImpl::EvaluateDiscrete(grpc::CallbackServerContext* context,
                                                               const v1::EvaluateDiscreteRequest* request,
                                                               v1::EvaluateDiscreteResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=, this] {
    const absl::Status status =
        HandleEvaluateDiscrete(*request, limits_, [context] { return !context->IsCancelled(); }, response);
    if (status.ok() && metrics_) metrics_->AddPointsEvaluated("discrete", static_cast<double>(response->length()));
    return status;
  });
}

grpc::ServerUnaryReactor* DensityServiceImpl::SummarizeProfile(grpc::CallbackServerContext* context,
                                                               const v1::SummarizeProfileRequest* request,
                                                               v1::SummarizeProfileResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request,
                  [=, this] { return HandleSummarizeProfile(*request, limits_, response); });
}

grpc::ServerUnaryReactor* DensityServiceImpl::FitProfile(grpc::CallbackServerContext* context,
                                                         const v1::FitProfileRequest* request,
                                                         v1::FitProfileResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request,
                  [=] { return HandleFitProfile(*request, response); });
}

}  // namespace posbias::service
