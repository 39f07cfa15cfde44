// posbias.v1.JobService over gRPC: submit Jacobian-norm jobs into the durable queue, watch them,
// cancel and delete them, and fetch their results.
#pragma once

#include <atomic>

#include "posbias/v1/job_service.grpc.pb.h"
#include "server/jobs/job_store.h"
#include "server/jobs/worker_pool.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_registry.h"

namespace posbias::service {

struct JobLimits {
  int64_t max_queued = 1000;          // Jobs waiting in QUEUED.
  int64_t max_sequence_length = 131072;
  int64_t max_samples = 65536;
  int64_t max_probes = 4096;
  bool cuda_available = false;        // Whether a CUDA worker exists.
};

class JobServiceImpl final : public v1::JobService::Service {
 public:
  JobServiceImpl(jobs::JobStore* store, registry::ModelRegistry* registry, jobs::WorkerPool* pool,
                 JobLimits limits, metrics::Metrics* metrics)
      : store_(store), registry_(registry), pool_(pool), limits_(limits), metrics_(metrics) {}

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
  registry::ModelRegistry* registry_;
  jobs::WorkerPool* pool_;
  JobLimits limits_;
  metrics::Metrics* metrics_;
  std::atomic<bool> shutting_down_{false};
};

// Job record -> public Job message.
void JobToProto(const jobs::JobRecord& job, v1::Job* out);

}  // namespace posbias::service
