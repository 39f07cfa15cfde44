// ModelService and JobService until the model registry and the job queue land: every RPC answers
// UNIMPLEMENTED with the reason NOT_IMPLEMENTED and a message naming the method, like any other
// posbias error (the generated base classes would answer without a reason).
#pragma once

#include "posbias/v1/job_service.grpc.pb.h"
#include "posbias/v1/model_service.grpc.pb.h"
#include "server/metrics/metrics.h"

namespace posbias::service {

class UnimplementedModelService final : public v1::ModelService::Service {
 public:
  explicit UnimplementedModelService(metrics::Metrics* metrics) : metrics_(metrics) {}
  grpc::Status RegisterModel(grpc::ServerContext*, const v1::RegisterModelRequest*, v1::Model*) override;
  grpc::Status UploadModel(grpc::ServerContext*, grpc::ServerReader<v1::UploadModelRequest>*,
                           v1::Model*) override;
  grpc::Status GetModel(grpc::ServerContext*, const v1::GetModelRequest*, v1::Model*) override;
  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*,
                          v1::ListModelsResponse*) override;
  grpc::Status DeleteModel(grpc::ServerContext*, const v1::DeleteModelRequest*,
                           v1::DeleteModelResponse*) override;
  grpc::Status ExportModel(grpc::ServerContext*, const v1::ExportModelRequest*,
                           grpc::ServerWriter<v1::ExportModelResponse>*) override;
  grpc::Status ListPresets(grpc::ServerContext*, const v1::ListPresetsRequest*,
                           v1::ListPresetsResponse*) override;

 private:
  metrics::Metrics* metrics_;
};

class UnimplementedJobService final : public v1::JobService::Service {
 public:
  explicit UnimplementedJobService(metrics::Metrics* metrics) : metrics_(metrics) {}
  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*,
                        v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest*,
                         v1::DeleteJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override;
  grpc::Status GetJobResult(grpc::ServerContext*, const v1::GetJobResultRequest*,
                            v1::GetJobResultResponse*) override;

 private:
  metrics::Metrics* metrics_;
};

}  // namespace posbias::service
