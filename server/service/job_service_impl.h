// posbias.v1.JobService over gRPC's callback API: submit Jacobian-norm jobs into the durable queue,
// watch them (streams held without a thread, job_watches.h), cancel and delete them, and fetch
// their results. The unary calls' work runs on the call executor.
#pragma once

#include <atomic>

#include "posbias/v1/job_service.grpc.pb.h"
#include "server/admission/job_admission.h"
#include "server/jobs/job_store.h"
#include "server/jobs/worker_pool.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"
#include "server/service/call_auth.h"
#include "server/service/call_executor.h"
#include "server/service/job_watches.h"
#include "server/service/tokenizers.h"

namespace posbias::service {

using admission::JobLimits;

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  JobServiceImpl(jobs::JobStore* store, registry::ModelCatalog* catalog, jobs::WorkerPool* pool,
                 JobLimits limits, metrics::Metrics* metrics, JobWatches::Options watch_options = {})
      : store_(store), catalog_(catalog), pool_(pool), limits_(limits), metrics_(metrics),
        watches_(store, metrics, watch_options) {}
  // Where the calls' work runs (set before the server starts); starts the watch poller.
  // The models' tokenizers, for text inputs (the model service's; set before the server starts).
  void set_tokenizers(Tokenizers* tokenizers) { tokenizers_ = tokenizers; }
  void Start(CallExecutor* executor, const CallAuth* auth) {
    executor_ = executor;
    auth_ = auth;
    watches_.Start();
  }
  // Ends open WatchJob streams and refuses new submissions (server shutdown).
  void Shutdown() {
    shutting_down_ = true;
    watches_.Stop();
  }

  grpc::ServerUnaryReactor* SubmitJob(grpc::CallbackServerContext*, const v1::SubmitJobRequest*, v1::Job*) override;
  grpc::ServerUnaryReactor* GetJob(grpc::CallbackServerContext*, const v1::GetJobRequest*, v1::Job*) override;
  grpc::ServerUnaryReactor* ListJobs(grpc::CallbackServerContext*, const v1::ListJobsRequest*,
                                     v1::ListJobsResponse*) override;
  // Answered on gRPC's thread, so a cancel gets through however busy the server is.
  grpc::ServerUnaryReactor* CancelJob(grpc::CallbackServerContext*, const v1::CancelJobRequest*, v1::Job*) override;
  grpc::ServerUnaryReactor* DeleteJob(grpc::CallbackServerContext*, const v1::DeleteJobRequest*,
                                      v1::DeleteJobResponse*) override;
  grpc::ServerWriteReactor<v1::WatchJobResponse>* WatchJob(grpc::CallbackServerContext*,
                                                           const v1::WatchJobRequest*) override;
  grpc::ServerUnaryReactor* GetJobResult(grpc::CallbackServerContext*, const v1::GetJobResultRequest*,
                                         v1::GetJobResultResponse*) override;

 private:
  absl::StatusOr<v1::Job> Submit(Caller& caller, const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> Cancel(Caller& caller, const std::string& id);
  absl::Status Get(const Caller& caller, const v1::GetJobRequest& request, v1::Job* response);
  absl::Status List(const Caller& caller, const v1::ListJobsRequest& request, v1::ListJobsResponse* response);
  absl::Status Result(const Caller& caller, const v1::GetJobResultRequest& request, v1::GetJobResultResponse* response);
  // The job when the caller may see it; another tenant's job is NOT_FOUND like a missing one.
  absl::StatusOr<jobs::JobRecord> Visible(const Caller& caller, const std::string& id);
  // RESOURCE_EXHAUSTED / QUOTA_EXCEEDED when the caller has max_queued_jobs queued already.
  uint32_t QueuePosition(const jobs::JobRecord& job);

  jobs::JobStore* store_;
  registry::ModelCatalog* catalog_;
  jobs::WorkerPool* pool_;
  JobLimits limits_;
  metrics::Metrics* metrics_;
  JobWatches watches_;
  CallExecutor* executor_ = nullptr;
  const CallAuth* auth_ = nullptr;
  Tokenizers* tokenizers_ = nullptr;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace posbias::service
