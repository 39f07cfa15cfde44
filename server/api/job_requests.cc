#include "server/api/job_requests.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/naming/client_names.h"
#include "server/paging/page_token.h"
#include "server/host/memory.h"
#include "server/jobs/jacobian_report.h"
#include "server/api/job_convert.h"
#include "server/api/result_pages.h"
#include "server/api/model_visibility.h"
#include "server/text/text_input.h"
#include "server/status/error.h"

namespace posbias::api {

absl::StatusOr<jobs::JobRecord> VisibleJob(JobRequests& service, const Caller& caller, const std::string& id) {
  auto job = service.store->Get(id);
  if (job.ok() && !caller.Sees(auth::ResourceKind::kJob, job->tenant)) return HiddenJob(id);
  return job;
}

JobWatchState::Step JobWatchState::Look(const absl::StatusOr<jobs::JobRecord>& job) {
  Step step;
  if (!job.ok()) {
    if (job.status().code() != absl::StatusCode::kUnavailable) step.end = job.status();
    return step;
  }
  if (!watcher_ || !auth::Sees(*watcher_, auth::ResourceKind::kJob, job->tenant)) {
    step.end = HiddenJob(id_);
    return step;
  }
  if (job->updated_ms == last_update_ && job->state == last_state_) return step;
  last_update_ = job->updated_ms;
  last_state_ = job->state;
  step.message.emplace();
  JobToProto(*job, step.message->mutable_job());
  if (jobs::IsTerminal(job->state)) step.end = absl::OkStatus();
  return step;
}

absl::StatusOr<v1::Job> HandleCancelJob(JobRequests& service, Caller& caller, const v1::CancelJobRequest& request) {
  const std::string& id = request.id();
  caller.resource = id;
  auto job = VisibleJob(service, caller, id);
  if (!job.ok()) return job.status();
  if (jobs::IsTerminal(job->state) || job->state == jobs::JobState::kCancelling) {
    v1::Job out;
    JobToProto(*job, &out);
    return out;  // Cancelling is idempotent.
  }
  auto moved = service.store->Transition(id, jobs::StateAfterCancel(job->state), {});
  if (!moved.ok()) return moved.status();
  v1::Job out;
  JobToProto(*moved, &out);
  return out;
}

absl::StatusOr<v1::DeleteJobResponse> HandleDeleteJob(JobRequests& service, Caller& caller, const v1::DeleteJobRequest& request) {
  caller.resource = request.id();
  if (auto job = VisibleJob(service, caller, request.id()); !job.ok()) return job.status();
  if (auto deleted = service.store->Delete(request.id(), request.force()); !deleted.ok()) return deleted;
  return v1::DeleteJobResponse();
}

}  // namespace posbias::api
