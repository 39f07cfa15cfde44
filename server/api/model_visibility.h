// Which models a caller sees, and in which namespace its registrations land: one rule for the
// model service, its transfers and the job service.
//
// A caller sees public models (tenant "") and its own tenant's; an admin sees all. What an admin
// (or any caller of a server without authentication) registers is public; anyone else's belongs
// to its tenant. A bare name means the caller's tenant's model of that name, else the public one;
// "tenant/name" names a model of that namespace (registry::ModelPath).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "server/registry/model_catalog.h"
#include "server/api/caller.h"

namespace posbias::api {

std::string ModelTenantOf(const Caller& caller);
bool SeesModel(const Caller& caller, const registry::ModelEntry& entry);
// The model `name` if the caller sees it; NOT_FOUND / MODEL_NOT_FOUND in the words of a model
// that does not exist otherwise (no existence leak across tenants).
absl::StatusOr<registry::ModelEntry> FindVisibleModel(registry::ModelCatalog& catalog, const Caller& caller,
                                                      const std::string& name);

}  // namespace posbias::api
