// The job service's RPCs as plain functions of (caller, request) -> response: submission with its
// text layouts and admission, reads and lists within the caller's tenant, cancel, delete, result
// pages. No gRPC types, so tests call them directly; job_service_impl.cc only wires them to the
// callback API (RunUnary), and WatchJob's stream asks Visible here before it opens.
#pragma once

#include <atomic>
#include <string>

#include "absl/status/statusor.h"
#include "posbias/v1/job_service.pb.h"
#include "server/admission/job_admission.h"
#include "server/jobs/job_store.h"
#include "server/jobs/worker_pool.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"
#include "server/service/call_auth.h"
#include "server/text/tokenizers.h"

namespace posbias::service {

class JobRequests {
 public:
  // All outlive this; `pool`, `metrics` and `tokenizers` may be nullptr (no local workers to wake,
  // no metrics, text inputs off).
  JobRequests(jobs::JobStore* store, registry::ModelCatalog* catalog, jobs::WorkerPool* pool,
              admission::JobLimits limits, metrics::Metrics* metrics, text::Tokenizers* tokenizers)
      : store_(store), catalog_(catalog), pool_(pool), limits_(limits), metrics_(metrics), tokenizers_(tokenizers) {}

  // The models' tokenizers, for text inputs (set before the server starts).
  void set_tokenizers(text::Tokenizers* tokenizers) { tokenizers_ = tokenizers; }
  // From now on submissions are UNAVAILABLE / SHUTTING_DOWN.
  void Shutdown() { shutting_down_ = true; }

  // Sets caller.resource (the audit line) to the job id.
  absl::StatusOr<v1::Job> Submit(Caller& caller, const v1::SubmitJobRequest& request);
  absl::StatusOr<v1::Job> Get(const Caller& caller, const v1::GetJobRequest& request);
  absl::StatusOr<v1::ListJobsResponse> List(const Caller& caller, const v1::ListJobsRequest& request);
  absl::StatusOr<v1::Job> Cancel(Caller& caller, const v1::CancelJobRequest& request);
  absl::StatusOr<v1::DeleteJobResponse> Delete(Caller& caller, const v1::DeleteJobRequest& request);
  absl::StatusOr<v1::GetJobResultResponse> Result(const Caller& caller, const v1::GetJobResultRequest& request);

  // The job when the caller sees it (auth/visibility.h); another tenant's job is NOT_FOUND in the
  // words of a missing one.
  absl::StatusOr<jobs::JobRecord> Visible(const Caller& caller, const std::string& id);

 private:
  // 0 = next to run, among the queued jobs of its own tenant.
  uint32_t QueuePosition(const jobs::JobRecord& job);

  jobs::JobStore* store_;
  registry::ModelCatalog* catalog_;
  jobs::WorkerPool* pool_;
  admission::JobLimits limits_;
  metrics::Metrics* metrics_;
  text::Tokenizers* tokenizers_;
  std::atomic<bool> shutting_down_{false};
};

}  // namespace posbias::service
