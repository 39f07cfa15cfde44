#include "server/api/model_requests.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/naming/client_names.h"
#include "server/paging/page_token.h"
#include "server/api/model_convert.h"
#include "server/api/model_visibility.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

// Active jobs on a model as the caller may count them: its tenant's, or everyone's for an admin.
absl::StatusOr<int64_t> ActiveJobs(const ModelRequests& service, const Caller& caller, const registry::ModelEntry& model) {
  return service.jobs.active(model, caller.principal.admin() ? std::nullopt : std::optional<std::string>(caller.tenant()));
}

}  // namespace

absl::StatusOr<v1::Model> HandleRegisterModel(ModelRequests& service, Caller& caller, const v1::RegisterModelRequest& request) {
  auto registration = RegistrationFromRequest(request);
  if (!registration.ok()) return registration.status();
  caller.resource = registration->name;
  auto entry = service.catalog->Register(registration->name, registration->source, registration->labels,
                                  registration->request_id, ModelTenantOf(caller), [&caller] { return caller.Gone(); });
  if (!entry.ok()) return entry.status();
  v1::Model model;
  ModelToProto(*entry, 0, &model);
  return model;
}

absl::StatusOr<v1::Model> HandleGetModel(ModelRequests& service, Caller& caller, const v1::GetModelRequest& request) {
  auto entry = FindVisibleModel(*service.catalog, caller, request.name());
  if (!entry.ok()) return entry.status();
  auto active = ActiveJobs(service, caller, *entry);
  if (!active.ok()) return active.status();
  v1::Model model;
  ModelToProto(*entry, *active, &model);
  return model;
}

absl::StatusOr<v1::ListModelsResponse> HandleListModels(ModelRequests& service, Caller& caller, const v1::ListModelsRequest& request) {
  const uint32_t page_size = request.page_size() == 0 ? 50 : std::min<uint32_t>(request.page_size(), 1000);
  auto terms = naming::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return terms.status();
  const std::string selection = absl::StrCat(request.family(), "|", request.label_selector(), "|",
                                             caller.principal.admin() ? "*" : caller.tenant());
  auto after = paging::RedeemPageToken(request.page_token(), "ListModels", selection);
  if (!after.ok()) return after.status();
  std::vector<registry::ModelEntry> matching;
  for (const auto& entry : service.catalog->List()) {  // Sorted by path ("name", "tenant/name").
    if (request.family() != v1::MODEL_FAMILY_UNSPECIFIED && FamilyToProto(entry.config.family) != request.family()) continue;
    if (!naming::MatchesLabels(entry.labels, *terms)) continue;
    if (!SeesModel(caller, entry)) continue;
    if (!after->empty() && registry::ModelPath(entry) <= *after) continue;
    matching.push_back(entry);
  }
  v1::ListModelsResponse response;
  for (size_t i = 0; i < matching.size() && i < page_size; ++i) {
    auto active = ActiveJobs(service, caller, matching[i]);
    if (!active.ok()) return active.status();
    ModelToProto(matching[i], *active, response.add_models());
  }
  if (matching.size() > page_size) {
    response.set_next_page_token(
        paging::IssuePageToken("ListModels", selection, registry::ModelPath(matching[page_size - 1])));
  }
  return response;
}

absl::StatusOr<v1::DeleteModelResponse> HandleDeleteModel(ModelRequests& service, Caller& caller, const v1::DeleteModelRequest& request) {
  caller.resource = request.name();
  auto entry = FindVisibleModel(*service.catalog, caller, request.name());
  if (!entry.ok()) return entry.status();
  if (entry->tenant.empty() && !entry->builtin && !caller.principal.admin()) {
    return ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                           absl::StrCat(request.name(), " is a public model: deleting it needs the role admin"));
  }
  // In use by anyone's jobs: a public model's users are every tenant. A store that cannot count
  // them refuses the deletion (its error), so no model in use is deleted unseen.
  auto active = service.jobs.active(*entry, std::nullopt);
  if (!active.ok()) return active.status();
  if (auto deleted = service.catalog->Delete(registry::ModelPath(*entry), request.force(), *active); !deleted.ok()) {
    return deleted;
  }
  // Jobs bound to this registration fail at their start anyway (MODEL_NOT_FOUND); force ends them
  // now and says which.
  v1::DeleteModelResponse response;
  if (request.force()) {
    for (const std::string& id : service.jobs.cancel(*entry)) response.add_cancelled_job_ids(id);
  }
  return response;
}

absl::StatusOr<v1::ListPresetsResponse> HandleListPresets(ModelRequests&, Caller&, const v1::ListPresetsRequest&) {
  v1::ListPresetsResponse response;
  for (const std::string& name : models::PresetNames()) {
    auto* preset = response.add_presets();
    preset->set_name(name);
    const models::ModelConfig config = *models::PresetConfig(name);
    ConfigToProto(config, preset->mutable_config());
    preset->set_test_preset(name.find("tiny") != std::string::npos);
    const auto parameters = static_cast<uint64_t>(models::EstimatedParameters(config));
    preset->set_parameter_count(parameters);
    preset->set_memory_bytes(parameters * 4);  // Float32.
  }
  return response;
}

absl::StatusOr<v1::TokenizeResponse> HandleTokenize(ModelRequests& service, Caller& caller, const v1::TokenizeRequest& request) {
  auto entry = FindVisibleModel(*service.catalog, caller, request.model());
  if (!entry.ok()) return entry.status();
  auto tokenizer = service.tokenizers.For(*entry);
  if (!tokenizer.ok()) return tokenizer.status();
  v1::TokenizeResponse response;
  if (auto status = text::RunTokenize(**tokenizer, request, &response); !status.ok()) return status;
  return response;
}

}  // namespace posbias::api
