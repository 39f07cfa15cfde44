#include "server/api/job_requests.h"

#include <algorithm>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/admission/labels.h"
#include "server/admission/page_token.h"
#include "server/host/memory.h"
#include "server/jobs/boundary_spikes.h"
#include "server/jobs/jacobian_report.h"
#include "server/api/job_convert.h"
#include "server/api/result_pages.h"
#include "server/api/model_visibility.h"
#include "server/text/text_input.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

uint64_t DrawSeed() { return std::random_device{}() * uint64_t{0x100000000} + std::random_device{}(); }

// What selects ListJobs' jobs (page_size excluded), the binding of its page tokens.
std::string ListJobsSelection(const v1::ListJobsRequest& request) {
  std::vector<int> states(request.states().begin(), request.states().end());
  std::sort(states.begin(), states.end());
  return absl::StrCat(absl::StrJoin(states, ","), "|", request.model(), "|", request.label_selector());
}

// The principal's jobs in `states` (one COUNT in the store).
absl::StatusOr<uint32_t> CountOwnJobs(JobRequests& service, const std::string& owner,
                                      std::vector<jobs::JobState> states) {
  jobs::ListFilter filter;
  filter.states = std::move(states);
  filter.owner = owner;
  auto count = service.store->Count(filter);
  if (!count.ok()) return count.status();
  return static_cast<uint32_t>(*count);
}

}  // namespace

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

absl::StatusOr<v1::Job> HandleSubmitJob(JobRequests& service, Caller& caller, const v1::SubmitJobRequest& request) {
  if (service.shutting_down) return ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown, "the server is shutting down");
  auto record = RecordFromRequest(request, DrawSeed());
  if (!record.ok()) return record.status();
  record->tenant = caller.tenant();
  record->owner = caller.principal.name;
  record->max_running = static_cast<int32_t>(caller.principal.max_running_jobs);
  auto model = FindVisibleModel(*service.catalog, caller, record->spec.model);
  if (!model.ok()) return model.status();
  // A job belongs to its model's tenant (README, Security): an admin's job on a tenant's private
  // model is that tenant's, so nobody who cannot see the model sees the job; a job on a public
  // model is the submitter's tenant's.
  if (!model->tenant.empty()) record->tenant = model->tenant;
  // The job names the model as its tenant sees it (an admin's job on a tenant's model: by path),
  // and is bound to this registration, not to the name.
  record->spec.model = model->tenant.empty() || model->tenant == record->tenant ? model->name : registry::ModelPath(*model);
  record->spec.model_uid = model->uid;
  record->spec.model_weights_sha256 = model->weights_sha256;
  if (request.spec().jacobian_norm().input().has_text()) {
    if (service.tokenizers == nullptr) {
      return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented, "text inputs are off");
    }
    auto tokenizer = service.tokenizers->For(*model);
    if (!tokenizer.ok()) return tokenizer.status();
    // LOG_PROB at T = L scores the token after position L: the text gives that one too.
    auto laid_out = text::LayOutText(**tokenizer, request.spec().jacobian_norm().input().text(), record->spec.length,
                               jobs::NeedsNextToken(record->spec));
    if (!laid_out.ok()) return laid_out.status();
    record->spec.input = jobs::JacobianInput::kGivenTokens;
    record->spec.tokens = std::move(laid_out->tokens);
    record->spec.document_starts = std::move(laid_out->document_starts);
    record->spec.needle_sweep = std::move(laid_out->needle_sweep);
    record->spec.samples = static_cast<int64_t>(record->spec.tokens.size());
  }
  const auto host = host::ReadHostMemory();
  if (auto admitted = admission::AdmitJob(*record, *model, service.limits, static_cast<double>(host.total_bytes));
      !admitted.ok()) {
    return admitted;
  }
  record->request_id = TenantRequestKey(caller.tenant(), record->request_id);  // Checked above as the client's.
  // The principal's queued-jobs quota is counted in the store's insert transaction.
  auto created = service.store->Create(*record, service.limits.max_queued, caller.principal.max_queued_jobs);
  if (!created.ok()) return created.status();
  if (!created->created && !RequestMatchesJob(*record, RequestNamesSeed(request), created->job)) {
    return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kRequestIdReused,
                           absl::StrCat("request_id ", request.request_id(), " was used for job ", created->job.id,
                                        " with a different request; use a new request_id for a new job"));
  }
  if (created->created && service.pool != nullptr) service.pool->Wake();
  if (created->created && service.metrics != nullptr) service.metrics->JobSubmitted();
  caller.resource = created->job.id;
  v1::Job job;
  JobToProto(created->job, &job);
  return job;
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
  auto moved = service.store->Transition(id, job->state == jobs::JobState::kQueued ? jobs::JobState::kCancelled
                                                                            : jobs::JobState::kCancelling, {});
  if (!moved.ok()) return moved.status();
  v1::Job out;
  JobToProto(*moved, &out);
  return out;
}

absl::StatusOr<v1::Job> HandleGetJob(JobRequests& service, Caller& caller, const v1::GetJobRequest& request) {
  auto job = VisibleJob(service, caller, request.id());
  if (!job.ok()) return job.status();
  v1::Job response;
  JobToProto(*job, &response);
  if (job->state == jobs::JobState::kQueued) {
    // 0 = next to run: the queued jobs of its tenant that the claim order takes before it (higher
    // priority, or equal and older). Other tenants' jobs are not counted: a position must not tell
    // how busy they are.
    auto ahead = service.store->CountQueuedAhead(*job, job->tenant);
    if (!ahead.ok()) return ahead.status();
    response.set_queue_position(static_cast<uint32_t>(*ahead));
  }
  return response;
}

absl::StatusOr<v1::ListJobsResponse> HandleListJobs(JobRequests& service, Caller& caller, const v1::ListJobsRequest& request) {
  v1::ListJobsResponse out;
  auto* response = &out;
  jobs::ListFilter filter;
  if (!caller.principal.admin()) filter.tenant = caller.tenant();
  for (int i = 0; i < request.states_size(); ++i) {  // Known states only, each once (bounded SQL).
    const int state = request.states(i);
    if (state == v1::JOB_STATE_UNSPECIFIED || !v1::JobState_IsValid(state)) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("states[", i, "]"), std::to_string(state),
                                   "QUEUED, RUNNING, CANCELLING, SUCCEEDED, FAILED or CANCELLED"});
    }
    const auto value = static_cast<jobs::JobState>(state);
    if (std::find(filter.states.begin(), filter.states.end(), value) == filter.states.end()) filter.states.push_back(value);
  }
  filter.model = request.model();
  auto terms = admission::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return terms.status();
  filter.labels = *std::move(terms);
  filter.page_size = static_cast<int32_t>(request.page_size());
  const std::string selection = absl::StrCat(ListJobsSelection(request), "|", filter.tenant.value_or("*"));
  auto cursor = admission::RedeemPageToken(request.page_token(), "ListJobs", selection);
  if (!cursor.ok()) return cursor.status();
  filter.page_token = *std::move(cursor);
  auto page = service.store->List(filter);
  if (!page.ok()) return page.status();
  for (const auto& job : page->jobs) JobToProto(job, response->add_jobs());
  response->set_next_page_token(admission::IssuePageToken("ListJobs", selection, page->next_page_token));
  return out;
}

absl::StatusOr<v1::DeleteJobResponse> HandleDeleteJob(JobRequests& service, Caller& caller, const v1::DeleteJobRequest& request) {
  caller.resource = request.id();
  if (auto job = VisibleJob(service, caller, request.id()); !job.ok()) return job.status();
  if (auto deleted = service.store->Delete(request.id(), request.force()); !deleted.ok()) return deleted;
  return v1::DeleteJobResponse();
}

absl::StatusOr<v1::GetJobResultResponse> HandleGetJobResult(JobRequests& service, Caller& caller,
                                                             const v1::GetJobResultRequest& request) {
  v1::GetJobResultResponse out;
  auto* response = &out;
  auto job = VisibleJob(service, caller, request.id());
  if (!job.ok()) return job.status();
  auto text = service.store->GetResult(request.id());
  if (!text.ok()) return text.status();
  const auto report = jobs::ReportFromText(*text);
  if (!report.ok()) return report.status();
  // The first page carries the report too: it counts against the page's size limit.
  const size_t reserved = request.page_token().empty() ? text->size() : 0;
  if (auto page = FillResultPage(request, *report, response, reserved); !page.ok()) return page;
  if (request.page_token().empty()) {  // First page only: the report, and where texts' documents begin.
    response->set_report_json(*text);
    auto* provenance = response->mutable_jacobian_norm()->mutable_provenance();  // Which registration was measured.
    provenance->set_model_name(job->spec.model);
    provenance->set_model_uid(report->model.uid.value_or(job->spec.model_uid));
    provenance->set_weights_sha256(report->model.weights_sha256.value_or(""));
    if (report->job) provenance->set_attempt(static_cast<uint32_t>(report->job->attempt));
    auto* result = response->mutable_jacobian_norm();
    for (const auto& starts : job->spec.document_starts) {
      auto* marks = result->add_document_starts();
      for (int64_t b : starts) marks->add_positions(static_cast<uint32_t>(b));
    }
    // Computed with the report from each sample's profile; older reports: from the mean profile.
    const auto spikes = report->boundary_spikes ? *report->boundary_spikes
                                                : jobs::BoundarySpikesOfMeans(job->spec.document_starts, report->sq_norm_mean);
    for (const auto& measured : spikes) {
      auto* spike = result->add_boundary_spikes();
      spike->set_position(static_cast<uint32_t>(measured.position));
      spike->set_ratio(measured.ratio);
      if (measured.ratio_mean) spike->set_ratio_mean(*measured.ratio_mean);
      if (measured.ratio_std) spike->set_ratio_std(*measured.ratio_std);
      if (measured.ratio_stderr) spike->set_ratio_stderr(*measured.ratio_stderr);
      if (measured.samples) spike->set_samples(static_cast<uint32_t>(*measured.samples));
    }
    for (const auto& measured : report->needle_sweep.value_or(std::vector<jobs::NeedleDepth>{})) {
      auto* depth = result->add_needle_sweep();
      depth->set_depth(measured.depth);
      depth->set_start(static_cast<uint32_t>(measured.start));
      depth->set_tokens(static_cast<uint32_t>(measured.tokens));
      depth->set_fillers(static_cast<uint32_t>(measured.fillers));
      depth->set_share_mean(measured.share_mean);
      depth->set_share_std(measured.share_std);
      depth->set_share_stderr(measured.share_stderr);
      depth->set_baseline_share_mean(measured.baseline_share_mean);
      depth->set_baseline_share_std(measured.baseline_share_std);
      depth->set_baseline_share_stderr(measured.baseline_share_stderr);
    }
  }
  return out;
}

absl::StatusOr<v1::Quota> HandleGetQuota(JobRequests& service, Caller& caller, const v1::GetQuotaRequest&) {
  static_assert(static_cast<int>(auth::Role::kReader) == v1::ACCESS_ROLE_READER &&
                static_cast<int>(auth::Role::kAdmin) == v1::ACCESS_ROLE_ADMIN);
  const auth::Principal& principal = caller.principal;
  auto queued = CountOwnJobs(service, principal.name, {jobs::JobState::kQueued});
  if (!queued.ok()) return queued.status();
  auto running = CountOwnJobs(service, principal.name, {jobs::JobState::kRunning, jobs::JobState::kCancelling});
  if (!running.ok()) return running.status();
  v1::Quota quota;
  quota.set_principal(principal.name);
  quota.set_tenant(principal.tenant);
  quota.set_role(static_cast<v1::AccessRole>(static_cast<int>(principal.role)));
  quota.set_max_queued_jobs(static_cast<uint32_t>(principal.max_queued_jobs));
  quota.set_max_running_jobs(static_cast<uint32_t>(principal.max_running_jobs));
  quota.set_queued_jobs(*queued);
  quota.set_running_jobs(*running);
  return quota;
}

}  // namespace posbias::service
