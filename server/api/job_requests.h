// The job service's RPCs as plain functions of (state, caller, request) -> response: submission
// with its text layouts and admission, reads and lists within the caller's tenant, cancel, delete,
// result pages. No gRPC types, so tests call them directly; the generated wiring
// (server/rpc/v1_wiring.h) serves them, and WatchJob's stream asks VisibleJob before it opens.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "posbias/v1/job_service.pb.h"
#include "server/admission/job_admission.h"
#include "server/jobs/job_store.h"
#include "server/jobs/worker_pool.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"
#include "server/api/caller.h"
#include "server/api/v1_handlers.h"
#include "server/text/model_tokenizers.h"

namespace posbias::api {

// The service's state: what its handlers read. The handlers, Handle<Method> for each unary RPC of
// JobService, are declared in v1_handlers.h (generated from the proto, which lists them)
// and defined by group: job_submission.cc (the submission), job_queries.cc (the reads) and
// job_requests.cc (the changes, and what the three share).
// HandleSubmitJob, HandleCancelJob and HandleDeleteJob set caller.resource (the audit line) to
// the job id.
struct JobRequests {
  // All outlive this; `pool`, `metrics` and `tokenizers` may be nullptr (no local workers to wake,
  // no metrics, text inputs off).
  JobRequests(jobs::JobStore* store_in, registry::ModelCatalog* catalog_in, jobs::WorkerPool* pool_in,
              admission::JobLimits limits_in, metrics::Metrics* metrics_in, text::Tokenizers* tokenizers_in)
      : store(store_in), catalog(catalog_in), pool(pool_in), limits(limits_in), metrics(metrics_in),
        tokenizers(tokenizers_in) {}

  // From now on submissions are UNAVAILABLE / SHUTTING_DOWN.
  void Shutdown() { shutting_down = true; }

  jobs::JobStore* store;
  registry::ModelCatalog* catalog;
  jobs::WorkerPool* pool;
  admission::JobLimits limits;
  metrics::Metrics* metrics;
  text::Tokenizers* tokenizers;  // The models' tokenizers, for text inputs (set before the server starts).
  std::atomic<bool> shutting_down{false};
};

// The job when the caller sees it (auth/visibility.h); another tenant's job is NOT_FOUND in the
// words of a missing one. WatchJob asks this before its stream opens.
absl::StatusOr<jobs::JobRecord> VisibleJob(JobRequests& service, const Caller& caller, const std::string& id);

// WatchJob's logic for one stream, gRPC-free (job_watches.h's reactors write what it decides): at
// each look at the job, the message to write, if any, and whether the stream then ends. The
// watcher's right to see the job is checked at every look, not only when the stream opened.
class JobWatchState {
 public:
  // `watcher` unset: a watch refused at the door, which sees nothing (it ends NOT_FOUND).
  JobWatchState(std::optional<auth::Principal> watcher, std::string id)
      : watcher_(std::move(watcher)), id_(std::move(id)) {}

  struct Step {
    std::optional<v1::WatchJobResponse> message;  // Written first, when set.
    std::optional<absl::Status> end;               // Then the stream ends with this.
  };
  // `job` as the store answered. A job that changed since the last message is written (the first
  // look always writes); a terminal one ends the stream OK after it; a deleted job, or one the
  // watcher no longer sees, ends it NOT_FOUND; the store out of reach (UNAVAILABLE) decides
  // nothing until the next look.
  Step Look(const absl::StatusOr<jobs::JobRecord>& job);

  const std::string& id() const { return id_; }

 private:
  std::optional<auth::Principal> watcher_;
  std::string id_;
  int64_t last_update_ = -1;
  jobs::JobState last_state_ = jobs::JobState::kQueued;
};

}  // namespace posbias::api
