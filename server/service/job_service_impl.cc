#include "server/service/job_service_impl.h"

#include <string>

#include "server/service/unary_call.h"

namespace posbias::service {

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                    const v1::SubmitJobRequest* request, v1::Job* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Submit(caller, r); });
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context, const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Get(caller, r); });
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request, v1::ListJobsResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.List(caller, r); });
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const v1::CancelJobRequest* request, v1::Job* response) {
  return RunUnaryInline(context, metrics_, auth_, *request, [&](Caller& caller) {
    auto job = requests_.Cancel(caller, *request);
    if (job.ok()) *response = *std::move(job);
    return job.status();
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* context,
                                                    const v1::DeleteJobRequest* request, v1::DeleteJobResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Delete(caller, r); });
}

grpc::ServerWriteReactor<v1::WatchJobResponse>* JobServiceImpl::WatchJob(grpc::CallbackServerContext* context,
                                                                         const v1::WatchJobRequest* request) {
  // Admitted here on gRPC's thread: a watch holds no executor thread.
  // The stream opens only after the tenant check succeeds: any failure of the lookup refuses it.
  auto caller = auth_->AdmitRequest(context, *request);
  absl::Status refusal = caller.status();
  if (caller.ok()) {
    if (auto job = requests_.Visible(*caller, request->id()); !job.ok()) refusal = job.status();
  }
  return watches_.Open(context, request->id(), std::string(auth_->MethodFor(request->GetDescriptor())), refusal,
                       caller.ok() ? caller->principal : auth::AnonymousAdmin());
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobResult(grpc::CallbackServerContext* context,
                                                       const v1::GetJobResultRequest* request,
                                                       v1::GetJobResultResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](const Caller& caller, const auto& r) { return requests_.Result(caller, r); });
}

}  // namespace posbias::service
