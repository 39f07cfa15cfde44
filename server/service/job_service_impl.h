// posbias.v1.JobService over gRPC's callback API: wiring only. The calls' logic is JobRequests
// (job_requests.h, gRPC-free); WatchJob's streams are held without a thread (job_watches.h). The
// unary calls' work runs on the call executor, CancelJob's on gRPC's thread.
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
#include "server/service/job_requests.h"
#include "server/service/job_watches.h"
#include "server/text/tokenizers.h"

namespace posbias::service {

using admission::JobLimits;

class JobServiceImpl final : public v1::JobService::CallbackService {
 public:
  JobServiceImpl(jobs::JobStore* store, registry::ModelCatalog* catalog, jobs::WorkerPool* pool,
                 JobLimits limits, metrics::Metrics* metrics, JobWatches::Options watch_options = {})
      : metrics_(metrics), requests_(store, catalog, pool, limits, metrics, nullptr),
        watches_(store, metrics, watch_options) {}
  // The models' tokenizers, for text inputs (the model service's; set before the server starts).
  void set_tokenizers(text::Tokenizers* tokenizers) { requests_.set_tokenizers(tokenizers); }
  // Where the calls' work runs (set before the server starts); starts the watch poller.
  void Start(CallExecutor* executor, const CallAuth* auth) {
    executor_ = executor;
    auth_ = auth;
    watches_.Start();
  }
  // Ends open WatchJob streams and refuses new submissions (server shutdown).
  void Shutdown() {
    requests_.Shutdown();
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
  metrics::Metrics* metrics_;
  JobRequests requests_;  // The calls' logic (job_requests.h); this class only wires it.
  JobWatches watches_;
  CallExecutor* executor_ = nullptr;
  const CallAuth* auth_ = nullptr;
};

}  // namespace posbias::service
