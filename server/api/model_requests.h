// The model service's unary RPCs as plain functions of (state, caller, request) -> response:
// register, get and list within what the caller sees, delete, the presets and Tokenize. No gRPC
// types, so tests call them directly; the generated wiring (server/rpc/v1_wiring.h) serves them,
// and the two streams (upload, export) are model_transfers.h's reactors.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "posbias/v1/model_service.pb.h"
#include "server/registry/model_catalog.h"
#include "server/api/caller.h"
#include "server/api/v1_handlers.h"
#include "server/text/model_tokenizers.h"

namespace posbias::api {

// The service's state: what its handlers read. The handlers, Handle<Method> for each unary RPC of
// ModelService, are declared in v1_handlers.h (generated from the proto) and defined in
// model_requests.cc. HandleRegisterModel and HandleDeleteModel set caller.resource (the audit
// line) to the model's name.
struct ModelRequests {
  // What the model service asks of the job store.
  struct Jobs {
    // Queued, running and cancelling jobs bound to the registration (of the tenant when given);
    // the store's error when it cannot count.
    std::function<absl::StatusOr<int64_t>(const registry::ModelEntry& model, const std::optional<std::string>& tenant)>
        active;
    // Cancels the queued and running jobs bound to the registration (DeleteModel with force);
    // the ids cancelled.
    std::function<std::vector<std::string>(const registry::ModelEntry& model)> cancel;
  };
  // `catalog` outlives this.
  ModelRequests(registry::ModelCatalog* catalog_in, Jobs jobs_in) : catalog(catalog_in), jobs(std::move(jobs_in)) {}

  registry::ModelCatalog* catalog;
  Jobs jobs;
  text::Tokenizers tokenizers;  // Of registered models (shared with the job service's text inputs).
};

}  // namespace posbias::api
