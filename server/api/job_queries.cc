// The job service's reads: GetJob, ListJobs, GetJobResult and GetQuota.
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
#include "server/statistics/boundary_spikes.h"
#include "server/jobs/jacobian_report.h"
#include "server/api/job_convert.h"
#include "server/api/result_pages.h"
#include "server/api/model_visibility.h"
#include "server/text/text_input.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

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
  auto terms = naming::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return terms.status();
  filter.labels = *std::move(terms);
  filter.page_size = static_cast<int32_t>(request.page_size());
  const std::string selection = absl::StrCat(ListJobsSelection(request), "|", filter.tenant.value_or("*"));
  auto cursor = paging::RedeemPageToken(request.page_token(), "ListJobs", selection);
  if (!cursor.ok()) return cursor.status();
  filter.page_token = *std::move(cursor);
  auto page = service.store->List(filter);
  if (!page.ok()) return page.status();
  for (const auto& job : page->jobs) JobToProto(job, response->add_jobs());
  response->set_next_page_token(paging::IssuePageToken("ListJobs", selection, page->next_page_token));
  return out;
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
                                                : statistics::BoundarySpikesOfMeans(job->spec.document_starts, report->sq_norm_mean);
    for (const auto& measured : spikes) SpikeToProto(measured, result->add_boundary_spikes());
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
    if (report->recall) RecallToProto(*report->recall, result->mutable_recall());
    if (report->recall_correlation) CorrelationToProto(*report->recall_correlation, result->mutable_recall_correlation());
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

}  // namespace posbias::api
