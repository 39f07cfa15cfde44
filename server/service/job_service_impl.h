// posbias.v1.JobService over gRPC: submit Jacobian-norm jobs into the durable queue, watch them,
// cancel and delete them, and fetch their results.
#pragma once

#include <atomic>

#include "posbias/v1/job_service.grpc.pb.h"
#include "server/admission/job_admission.h"
#include "server/jobs/job_store.h"
#include "server/jobs/worker_pool.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"

namespace posbias::service {

using admission::JobLimits;

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(jobs::JobStore* store, registry::ModelCatalog* catalog, jobs::WorkerPool* pool,
                 JobLimits limits, metrics::Metrics* metrics)
      : store_(store), catalog_(catalog), pool_(pool), limits_(limits), metrics_(metrics) {}

  // Stops open WatchJob streams (server shutdown).
  void Shutdown() { shutting_down_ = true; }

  grpc::Status SubmitJob(grpc::ServerContext*, const v1::SubmitJobRequest*, v1::Job*) override;
  grpc::Status GetJob(grpc::ServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::Status ListJobs(grpc::ServerContext*, const v1::ListJobsRequest*, v1::ListJobsResponse*) override;
  grpc::Status CancelJob(grpc::ServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::Status DeleteJob(grpc::ServerContext*, const v1::DeleteJobRequest*, v1::DeleteJobResponse*) override;
  grpc::Status WatchJob(grpc::ServerContext*, const v1::WatchJobRequest*,
                        grpc::ServerWriter<v1::WatchJobResponse>*) override;
  grpc::Status GetJobResult(grpc::ServerContext*, const v1::GetJobResultRequest*, v1::GetJobResultResponse*) override;

 private:
  absl::StatusOr<v1::Job> Submit(const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> Cancel(const std::string& id);
  uint32_t QueuePosition(const jobs::JobRecord& job);

  jobs::JobStore* store_;
  registry::ModelCatalog* catalog_;
  jobs::WorkerPool* pool_;
  JobLimits limits_;
  metrics::Metrics* metrics_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace posbias::service
