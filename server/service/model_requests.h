// The model service's unary RPCs as plain functions of (caller, request) -> response: register,
// get and list within what the caller sees, delete, the presets and Tokenize. No gRPC types, so
// tests call them directly; model_service_impl.cc only wires them to the callback API, and the
// two streams (upload, export) are model_transfers.h's reactors.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "posbias/v1/model_service.pb.h"
#include "server/registry/model_catalog.h"
#include "server/service/call_auth.h"
#include "server/text/tokenizers.h"

namespace posbias::service {

class ModelRequests {
 public:
  // What the model service asks of the job store.
  struct Jobs {
    // Queued, running and cancelling jobs bound to the registration (of the tenant when given).
    std::function<int64_t(const registry::ModelEntry& model, const std::optional<std::string>& tenant)> active;
    // Cancels the queued and running jobs bound to the registration (DeleteModel with force);
    // the ids cancelled.
    std::function<std::vector<std::string>(const registry::ModelEntry& model)> cancel;
  };
  // `catalog` outlives this.
  ModelRequests(registry::ModelCatalog* catalog, Jobs jobs) : catalog_(catalog), jobs_(std::move(jobs)) {}

  // Register and Delete set caller.resource (the audit line) to the model's name.
  absl::StatusOr<v1::Model> Register(Caller& caller, const v1::RegisterModelRequest& request);
  absl::StatusOr<v1::Model> Get(const Caller& caller, const v1::GetModelRequest& request);
  absl::StatusOr<v1::ListModelsResponse> List(const Caller& caller, const v1::ListModelsRequest& request);
  absl::StatusOr<v1::DeleteModelResponse> Delete(Caller& caller, const v1::DeleteModelRequest& request);
  absl::StatusOr<v1::ListPresetsResponse> ListPresets(const v1::ListPresetsRequest& request);
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const Caller& caller, const v1::TokenizeRequest& request);

  // The tokenizers of registered models (shared with the job service's text inputs).
  text::Tokenizers* tokenizers() { return &tokenizers_; }

 private:
  // Active jobs on a model as the caller may count them: its tenant's, or everyone's for an admin.
  int64_t ActiveJobs(const Caller& caller, const registry::ModelEntry& model) const;

  registry::ModelCatalog* catalog_;
  Jobs jobs_;
  text::Tokenizers tokenizers_;
};

}  // namespace posbias::service
