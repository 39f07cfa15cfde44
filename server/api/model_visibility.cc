#include "server/api/model_visibility.h"

namespace posbias::api {

std::string ModelTenantOf(const Caller& caller) { return auth::RegistrationTenant(caller.principal); }

bool SeesModel(const Caller& caller, const registry::ModelEntry& entry) {
  return caller.Sees(auth::ResourceKind::kModel, entry.tenant);
}

absl::StatusOr<registry::ModelEntry> FindVisibleModel(registry::ModelCatalog& catalog, const Caller& caller,
                                                      const std::string& name) {
  auto entry = catalog.Find(name, ModelTenantOf(caller));
  if (entry.ok() && !SeesModel(caller, *entry)) return HiddenModel(name);
  return entry;
}

}  // namespace posbias::api
