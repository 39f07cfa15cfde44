#include "server/service/job_service_impl.h"

#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/admission/job_admission.h"
#include "server/admission/labels.h"
#include "server/host/memory.h"
#include "server/jobs/jacobian_report.h"
#include "server/service/job_convert.h"
#include "server/service/unary_call.h"
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

grpc::ServerUnaryReactor* JobServiceImpl::SubmitJob(grpc::CallbackServerContext* context,
                                                    const v1::SubmitJobRequest* request, v1::Job* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "SubmitJob", [=, this] {
    auto job = Submit(*request);
    if (job.ok()) *response = *std::move(job);
    return job.status();
  });
}

absl::Status JobServiceImpl::Get(const v1::GetJobRequest& request, v1::Job* response) {
  auto job = store_->Get(request.id());
  if (!job.ok()) return job.status();
  JobToProto(*job, response);
  if (job->state == jobs::JobState::kQueued) response->set_queue_position(QueuePosition(*job));
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJob(grpc::CallbackServerContext* context, const v1::GetJobRequest* request,
                                                 v1::Job* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "GetJob",
                  [=, this] { return Get(*request, response); });
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

absl::Status JobServiceImpl::List(const v1::ListJobsRequest& request, v1::ListJobsResponse* response) {
  jobs::ListFilter filter;
  for (int state : request.states()) filter.states.push_back(static_cast<jobs::JobState>(state));
  filter.model = request.model();
  auto terms = admission::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return terms.status();
  filter.labels = *std::move(terms);
  filter.page_size = static_cast<int32_t>(request.page_size());
  filter.page_token = request.page_token();
  auto page = store_->List(filter);
  if (!page.ok()) return page.status();
  for (const auto& job : page->jobs) JobToProto(job, response->add_jobs());
  response->set_next_page_token(page->next_page_token);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* JobServiceImpl::ListJobs(grpc::CallbackServerContext* context,
                                                   const v1::ListJobsRequest* request, v1::ListJobsResponse* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "ListJobs",
                  [=, this] { return List(*request, response); });
}

grpc::ServerUnaryReactor* JobServiceImpl::CancelJob(grpc::CallbackServerContext* context,
                                                    const v1::CancelJobRequest* request, v1::Job* response) {
  return RunUnaryInline(context, metrics_, std::string(kPrefix) + "CancelJob", [&] {
    auto job = Cancel(request->id());
    if (job.ok()) *response = *std::move(job);
    return job.status();
  });
}

grpc::ServerUnaryReactor* JobServiceImpl::DeleteJob(grpc::CallbackServerContext* context,
                                                    const v1::DeleteJobRequest* request, v1::DeleteJobResponse*) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "DeleteJob",
                  [=, this] { return store_->Delete(request->id(), request->force()); });
}

grpc::ServerWriteReactor<v1::WatchJobResponse>* JobServiceImpl::WatchJob(grpc::CallbackServerContext* context,
                                                                         const v1::WatchJobRequest* request) {
  return watches_.Open(context, request->id());
}

absl::Status JobServiceImpl::Result(const v1::GetJobResultRequest& request, v1::GetJobResultResponse* response) {
  auto text = store_->GetResult(request.id());
  if (!text.ok()) return text.status();
  const auto report = jobs::ReportFromText(*text);
  if (!report.ok()) return report.status();
  if (auto page = FillResultPage(request, *report, response); !page.ok()) return page;
  if (request.page_token().empty()) response->set_report_json(*text);  // First page only.
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* JobServiceImpl::GetJobResult(grpc::CallbackServerContext* context,
                                                       const v1::GetJobResultRequest* request,
                                                       v1::GetJobResultResponse* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "GetJobResult",
                  [=, this] { return Result(*request, response); });
}

}  // namespace posbias::service
