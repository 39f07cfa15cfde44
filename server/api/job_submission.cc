// SubmitJob: a request checked, admitted and stored as a queued job (idempotent by request_id).
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

}  // namespace

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

}  // namespace posbias::service
