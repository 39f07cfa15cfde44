// SubmitJob: a request checked, admitted and stored as a queued job (idempotent by request_id).
#include "server/api/job_requests.h"

#include <algorithm>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/naming/client_names.h"
#include "server/paging/page_token.h"
#include "server/host/memory.h"
#include "server/jobs/jacobian_report.h"
#include "server/models/config.h"
#include "server/api/job_convert.h"
#include "server/api/result_pages.h"
#include "server/api/model_visibility.h"
#include "server/text/recall_input.h"
#include "server/text/text_input.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

uint64_t DrawSeed() { return std::random_device{}() * uint64_t{0x100000000} + std::random_device{}(); }

// How a job of `tenant` names a registration: as its tenant sees it (an admin's job on another
// tenant's model: by path).
std::string NameInJob(const registry::ModelEntry& model, const std::string& tenant) {
  return model.tenant.empty() || model.tenant == tenant ? model.name : registry::ModelPath(model);
}

// An error about the i-th model of `versus`, naming it and the job's first model (its reason,
// field and allowed range kept).
absl::Status AboutVersus(const absl::Status& status, size_t i, const std::string& name, const std::string& first) {
  return WithMessage(status, absl::StrCat("spec.jacobian_norm.versus[", i, "] = ", name, " compared with model ", first,
                                         ": ", status.message()));
}

absl::Status Incompatible(size_t i, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat("spec.jacobian_norm.versus[", i, "]"), value, allowed});
}

// Text and recall inputs are laid out into ids with the model's tokenizer at submission.
bool IsLaidOut(const v1::SubmitJobRequest& request) {
  const auto& input = request.spec().jacobian_norm().input();
  return input.has_text() || input.has_recall();
}

absl::StatusOr<text::LaidOutText> LayOut(const tokenizer::Tokenizer& tokenizer, const v1::SubmitJobRequest& request,
                                         const jobs::JacobianJobSpec& spec) {
  const auto& input = request.spec().jacobian_norm().input();
  if (input.has_recall()) return text::LayOutRecall(tokenizer, input.recall(), spec);
  // LOG_PROB at T = L scores the token after position L: the text gives that one too.
  return text::LayOutText(tokenizer, input.text(), spec.length, jobs::NeedsNextToken(spec));
}

// Whether model `other` can take the inputs laid out for `first`: random ids from first's
// vocabulary, Gaussian embeddings of its width, text laid out into the same ids by its tokenizer.
// `compared` holds the tokenizer directories whose layout of the text is known to match (first's
// own to start with): each distinct tokenizer lays the text out once.
absl::Status CheckSharedInputs(JobRequests& service, const v1::SubmitJobRequest& request, const jobs::JobRecord& record,
                               const registry::ModelEntry& first, const registry::ModelEntry& other, size_t i,
                               std::set<std::string>& compared) {
  const auto& spec = record.spec;
  // Text inputs were laid out into given tokens before this (their ids are checked below).
  if (spec.input == jobs::JacobianInput::kRandomTokens && other.config.vocab_size < first.config.vocab_size) {
    return Incompatible(i, absl::StrCat(other.name, " (a vocabulary of ", other.config.vocab_size, ")"),
                        absl::StrCat("a vocabulary of at least ", first.config.vocab_size, " (model ", first.name,
                                     "'s: the random token ids are drawn from it)"));
  }
  if (spec.input == jobs::JacobianInput::kGaussianEmbeddings && other.config.hidden_size != first.config.hidden_size) {
    return Incompatible(i, absl::StrCat(other.name, " (width ", other.config.hidden_size, ")"),
                        absl::StrCat("width ", first.config.hidden_size, " (model ", first.name, "'s embeddings)"));
  }
  if (IsLaidOut(request) && spec.recall && spec.recall->token_ids) {  // The same ids for every model.
    const int64_t needed = std::max({spec.recall->key_ids[1], spec.recall->value_ids[1], spec.recall->filler_ids[1]});
    if (other.config.vocab_size < needed) {
      return Incompatible(i, absl::StrCat(other.name, " (a vocabulary of ", other.config.vocab_size, ")"),
                          absl::StrCat("a vocabulary of at least ", needed, " (the token-id recall probes' ids)"));
    }
    return absl::OkStatus();
  }
  if (!IsLaidOut(request) || service.tokenizers == nullptr) return absl::OkStatus();
  // The same tokenizer files lay the text out into the same ids.
  if (!compared.insert(other.tokenizer_dir).second) return absl::OkStatus();
  auto tokenizer = service.tokenizers->For(other);
  if (!tokenizer.ok()) return AboutVersus(tokenizer.status(), i, other.name, first.name);
  auto laid_out = LayOut(**tokenizer, request, spec);
  if (!laid_out.ok()) return AboutVersus(laid_out.status(), i, other.name, first.name);
  if (laid_out->tokens != spec.tokens) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument,
                                 request.spec().jacobian_norm().input().has_recall() ? "spec.jacobian_norm.input.recall"
                                                                                      : "spec.jacobian_norm.input.text",
                                 absl::StrCat("laid out into other token ids by ", other.name, "'s tokenizer than by ", first.name, "'s"),
                                 "models whose tokenizers give the same ids (compare those with given_tokens instead)"});
  }
  return absl::OkStatus();
}

// Binds `model`, the registration the request's model named, to the job: the name its tenant
// knows it by, its uid and its weights' digest.
void BindModel(const registry::ModelEntry& model, jobs::JobRecord& record) {
  record.spec.model = NameInJob(model, record.tenant);
  record.spec.model_uid = model.uid;
  record.spec.model_weights_sha256 = model.weights_sha256;
}

// Comparison jobs: binds each model of `versus` (converted from the request by name) as the
// caller sees it (another tenant's is NOT_FOUND), in the job's tenant, able to share the inputs,
// and admitted like the first model.
absl::Status BindVersus(JobRequests& service, Caller& caller, const v1::SubmitJobRequest& request,
                        const registry::ModelEntry& first, double host_bytes, jobs::JobRecord& record) {
  std::set<std::string> compared = {first.tokenizer_dir};  // Tokenizers whose layout of the text matches.
  for (size_t i = 0; i < record.spec.versus.size(); ++i) {
    jobs::JacobianJobSpec::VersusModel& versus = record.spec.versus[i];
    const std::string name = versus.model;  // As the request named it.
    registry::ModelEntry entry = first;
    if (versus.init) {
      if (first.config.family == models::Family::kTorchScript) {
        return Incompatible(i, "init", absl::StrCat("a registered model (", first.name, " has no initialization recipe to build)"));
      }
      entry.name = name;
      // Unset, for a checkpoint: the seed its trainer recorded (posbias-train's trainer_state.json;
      // 0 otherwise), so `init` is that model's own step 0; the job's spec says which seed it took.
      if (!request.spec().jacobian_norm().has_init_seed() && first.source.kind == registry::SourceKind::kCheckpoint) {
        record.spec.init_seed = first.source.seed;
      }
    } else {
      auto found = FindVisibleModel(*service.catalog, caller, name);
      if (!found.ok()) return AboutVersus(found.status(), i, name, first.name);
      if (found->tenant != first.tenant && !found->tenant.empty()) {
        return Incompatible(i, absl::StrCat(name, " (tenant ", found->tenant, ")"),
                            absl::StrCat("a public model or one of tenant ", first.tenant.empty() ? "(none)" : first.tenant,
                                         ", the job's (its results are that tenant's)"));
      }
      entry = *found;
      versus.model = NameInJob(*found, record.tenant);
      versus.uid = found->uid;
      versus.weights_sha256 = found->weights_sha256;
    }
    if (auto status = CheckSharedInputs(service, request, record, first, entry, i, compared); !status.ok()) {
      return status;
    }
    if (auto status = admission::AdmitJob(record, entry, service.limits, host_bytes); !status.ok()) {
      return AboutVersus(status, i, name, first.name);
    }
  }
  return absl::OkStatus();
}

// Text and recall inputs laid out into the job's given tokens: with the model's tokenizer, or as
// token-id recall probes, which need none.
absl::Status LayOutInputs(JobRequests& service, const v1::SubmitJobRequest& request, const registry::ModelEntry& model,
                          jobs::JobRecord& record) {
  if (!IsLaidOut(request)) return absl::OkStatus();
  const auto& input = request.spec().jacobian_norm().input();
  const bool token_ids = input.has_recall() && text::AsksTokenIds(input.recall(), model);
  if (service.tokenizers == nullptr && !token_ids) {
    return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented, "text and recall inputs are off");
  }
  absl::StatusOr<text::LaidOutText> laid_out;
  if (token_ids) {
    laid_out = text::LayOutTokenIdRecall(input.recall(), model, record.spec);
  } else {
    auto tokenizer = service.tokenizers->For(model);
    if (!tokenizer.ok()) return tokenizer.status();
    laid_out = LayOut(**tokenizer, request, record.spec);
  }
  if (!laid_out.ok()) return laid_out.status();
  record.spec.input = jobs::JacobianInput::kGivenTokens;
  record.spec.tokens = std::move(laid_out->tokens);
  record.spec.document_starts = std::move(laid_out->document_starts);
  record.spec.needle_sweep = std::move(laid_out->needle_sweep);
  record.spec.recall = std::move(laid_out->recall);
  record.spec.samples = static_cast<int64_t>(record.spec.tokens.size());
  return absl::OkStatus();
}

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
  // A job belongs to its model's tenant (docs/operations/security.md): an admin's job on a tenant's private
  // model is that tenant's, so nobody who cannot see the model sees the job; a job on a public
  // model is the submitter's tenant's.
  if (!model->tenant.empty()) record->tenant = model->tenant;
  // The job names the model as its tenant sees it (an admin's job on a tenant's model: by path),
  // and is bound to this registration, not to the name.
  BindModel(*model, *record);
  if (auto status = LayOutInputs(service, request, *model, *record); !status.ok()) return status;
  const auto host = host::ReadHostMemory();
  if (auto admitted = admission::AdmitJob(*record, *model, service.limits, static_cast<double>(host.total_bytes));
      !admitted.ok()) {
    return admitted;
  }
  if (auto bound = BindVersus(service, caller, request, *model, static_cast<double>(host.total_bytes), *record);
      !bound.ok()) {
    return bound;
  }
  record->request_id = PrincipalRequestKey(caller.tenant(), caller.principal.name, record->request_id);  // Checked above.
  // Nothing happens after the caller has gone (its deadline passed, or it cancelled): no job it
  // would never hear of.
  if (caller.Gone()) {
    return absl::CancelledError("the client went away (cancelled, or its deadline passed) before the job was created; "
                                "nothing was submitted");
  }
  // The principal's queued-jobs quota and the tenant's share of the queue are counted in the
  // store's insert transaction.
  const int64_t tenant_share =  // 0: a share of the whole queue is the queue's own limit.
      service.limits.tenant_share >= 1.0 ? 0 : limits::TenantShare(service.limits.max_queued, service.limits.tenant_share);
  auto created = service.store->Create(*record, service.limits.max_queued, caller.principal.max_queued_jobs, tenant_share);
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

}  // namespace posbias::api
