// The job service's RPCs as plain functions of (state, caller, request) -> response: submission
// with its text layouts and admission, reads and lists within the caller's tenant, cancel, delete,
// result pages. No gRPC types, so tests call them directly; the generated wiring
// (job_service_wiring.h) serves them, and WatchJob's stream asks VisibleJob before it opens.
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
#include "server/service/caller.h"
#include "server/service/job_service_handlers.h"
#include "server/text/tokenizers.h"

namespace posbias::service {

// The service's state: what its handlers read. The handlers, one per unary RPC, are declared in
// job_service_handlers.h (generated from the proto: HandleSubmitJob, HandleGetJob, HandleListJobs,
// HandleCancelJob, HandleDeleteJob, HandleGetJobResult) and defined in job_requests.cc.
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

}  // namespace posbias::service
