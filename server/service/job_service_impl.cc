#include "server/service/job_service_impl.h"

#include <chrono>
#include <random>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/admission/job_admission.h"
#include "server/admission/labels.h"
#include "server/host/memory.h"
#include "server/jobs/jacobian_report.h"
#include "server/service/job_convert.h"
#include "server/service/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

constexpr char kPrefix[] = "/posbias.v1.JobService/";

uint64_t DrawSeed() { return std::random_device{}() * uint64_t{0x100000000} + std::random_device{}(); }

}  // namespace

absl::StatusOr<v1::Job> JobServiceImpl::Submit(const v1::SubmitJobRequest& request) {
  if (shutting_down_) return ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown, "the server is shutting down");
  auto record = RecordFromRequest(request, DrawSeed());
  if (!record.ok()) return record.status();
  auto model = catalog_->Get(record->spec.model);
  if (!model.ok()) return model.status();
  const auto host = host::ReadHostMemory();
  if (auto admitted = admission::AdmitJob(*record, *model, limits_, static_cast<double>(host.total_bytes));
      !admitted.ok()) {
    return admitted;
  }
  auto created = store_->Create(*record, limits_.max_queued);
  if (!created.ok()) return created.status();
  if (!created->created && !RequestMatchesJob(*record, RequestNamesSeed(request), created->job)) {
    return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kRequestIdReused,
                           absl::StrCat("request_id ", request.request_id(), " was used for job ", created->job.id,
                                        " with a different request; use a new request_id for a new job"));
  }
  if (created->created && pool_ != nullptr) pool_->Wake();
  if (created->created && metrics_ != nullptr) metrics_->JobSubmitted();
  v1::Job job;
  JobToProto(created->job, &job);
  return job;
}

absl::StatusOr<v1::Job> JobServiceImpl::Cancel(const std::string& id) {
  auto job = store_->Get(id);
  if (!job.ok()) return job.status();
  if (jobs::IsTerminal(job->state) || job->state == jobs::JobState::kCancelling) {
    v1::Job out;
    JobToProto(*job, &out);
    return out;  // Cancelling is idempotent.
  }
  auto moved = store_->Transition(id, job->state == jobs::JobState::kQueued ? jobs::JobState::kCancelled
                                                                            : jobs::JobState::kCancelling, {});
  if (!moved.ok()) return moved.status();
  v1::Job out;
  JobToProto(*moved, &out);
  return out;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request, v1::Job* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "SubmitJob");
  auto job = Submit(*request);
  if (job.ok()) *response = *job;
  return scope.Finish(job.status(), context);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "GetJob");
  auto job = store_->Get(request->id());
  if (job.ok()) {
    JobToProto(*job, response);
    if (job->state == jobs::JobState::kQueued) response->set_queue_position(QueuePosition(*job));
  }
  return scope.Finish(job.status(), context);
}

uint32_t JobServiceImpl::QueuePosition(const jobs::JobRecord& job) {
  // 0 = next to run: queued jobs that run before it (higher priority, or equal and older).
  jobs::ListFilter filter;
  filter.states = {jobs::JobState::kQueued};
  filter.page_size = 1000;
  uint32_t ahead = 0;
  do {
    auto page = store_->List(filter);
    if (!page.ok()) break;
    for (const auto& other : page->jobs) {
      if (other.id == job.id) continue;
      ahead += other.priority > job.priority ||
               (other.priority == job.priority && (other.created_ms < job.created_ms ||
                                                   (other.created_ms == job.created_ms && other.id < job.id)));
    }
    filter.page_token = page->next_page_token;
  } while (!filter.page_token.empty());
  return ahead;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "ListJobs");
  jobs::ListFilter filter;
  for (int state : request->states()) filter.states.push_back(static_cast<jobs::JobState>(state));
  filter.model = request->model();
  auto terms = admission::ParseLabelSelector(request->label_selector());
  if (!terms.ok()) return scope.Finish(terms.status(), context);
  filter.labels = *std::move(terms);
  filter.page_size = static_cast<int32_t>(request->page_size());
  filter.page_token = request->page_token();
  auto page = store_->List(filter);
  if (page.ok()) {
    for (const auto& job : page->jobs) JobToProto(job, response->add_jobs());
    response->set_next_page_token(page->next_page_token);
  }
  return scope.Finish(page.status(), context);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request, v1::Job* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "CancelJob");
  auto job = Cancel(request->id());
  if (job.ok()) *response = *job;
  return scope.Finish(job.status(), context);
}

grpc::Status JobServiceImpl::DeleteJob(grpc::ServerContext* context, const v1::DeleteJobRequest* request,
                                       v1::DeleteJobResponse*) {
  RpcScope scope(metrics_, std::string(kPrefix) + "DeleteJob");
  return scope.Finish(store_->Delete(request->id(), request->force()), context);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                      grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  RpcScope scope(metrics_, std::string(kPrefix) + "WatchJob");
  int64_t last_update = -1;
  jobs::JobState last_state = jobs::JobState::kQueued;
  while (!context->IsCancelled() && !shutting_down_) {
    auto job = store_->Get(request->id());
    if (!job.ok()) return scope.Finish(job.status(), context);
    if (job->updated_ms != last_update || job->state != last_state || last_update < 0) {
      v1::WatchJobResponse message;
      JobToProto(*job, message.mutable_job());
      if (!writer->Write(message)) break;
      last_update = job->updated_ms;
      last_state = job->state;
    }
    if (jobs::IsTerminal(job->state)) return scope.Finish(absl::OkStatus(), context);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return scope.Finish(shutting_down_ ? ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown,
                                                       "the server is shutting down; watch again after it restarts")
                                     : absl::CancelledError("watch cancelled"), context);
}

grpc::Status JobServiceImpl::GetJobResult(grpc::ServerContext* context, const v1::GetJobResultRequest* request,
                                          v1::GetJobResultResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "GetJobResult");
  auto text = store_->GetResult(request->id());
  if (!text.ok()) return scope.Finish(text.status(), context);
  const auto report = jobs::ReportFromText(*text);
  if (!report.ok()) return scope.Finish(report.status(), context);
  auto page = FillResultPage(*request, *report, response);
  if (!page.ok()) return scope.Finish(page, context);
  if (request->page_token().empty()) response->set_report_json(*text);  // First page only.
  return scope.Finish(absl::OkStatus(), context);
}

}  // namespace posbias::service
