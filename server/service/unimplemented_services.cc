#include "server/service/unimplemented_services.h"

#include <string>

#include "server/service/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

grpc::Status NotImplemented(metrics::Metrics* metrics, grpc::ServerContext* context,
                            const std::string& service, const std::string& method) {
  RpcScope scope(metrics, "/posbias.v1." + service + "/" + method);
  return scope.Finish(
      ErrorWithReason(absl::StatusCode::kUnimplemented, "NOT_IMPLEMENTED",
                      "posbias.v1." + service + "." + method +
                          " is part of the v1 API but not implemented by this server version"),
      context);
}

}  // namespace

#define POSBIAS_NOT_IMPLEMENTED(Class, Service, Method, Arg2, Arg3)                     \
  grpc::Status Class::Method(grpc::ServerContext* context, Arg2, Arg3) {               \
    return NotImplemented(metrics_, context, Service, #Method);                        \
  }

POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", RegisterModel, const v1::RegisterModelRequest*, v1::Model*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", UploadModel, grpc::ServerReader<v1::UploadModelRequest>*, v1::Model*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", GetModel, const v1::GetModelRequest*, v1::Model*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", ListModels, const v1::ListModelsRequest*, v1::ListModelsResponse*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", DeleteModel, const v1::DeleteModelRequest*, v1::DeleteModelResponse*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", ExportModel, const v1::ExportModelRequest*, grpc::ServerWriter<v1::ExportModelResponse>*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedModelService, "ModelService", ListPresets, const v1::ListPresetsRequest*, v1::ListPresetsResponse*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", SubmitJob, const v1::SubmitJobRequest*, v1::Job*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", GetJob, const v1::GetJobRequest*, v1::Job*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", ListJobs, const v1::ListJobsRequest*, v1::ListJobsResponse*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", CancelJob, const v1::CancelJobRequest*, v1::Job*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", DeleteJob, const v1::DeleteJobRequest*, v1::DeleteJobResponse*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", WatchJob, const v1::WatchJobRequest*, grpc::ServerWriter<v1::WatchJobResponse>*)
POSBIAS_NOT_IMPLEMENTED(UnimplementedJobService, "JobService", GetJobResult, const v1::GetJobResultRequest*, v1::GetJobResultResponse*)
#undef POSBIAS_NOT_IMPLEMENTED

}  // namespace posbias::service
