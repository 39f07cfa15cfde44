#include "server/auth/visibility.h"

namespace posbias::auth {

bool Sees(const Principal& principal, ResourceKind kind, std::string_view owner_tenant) {
  if (principal.admin() || owner_tenant == principal.tenant) return true;
  return kind == ResourceKind::kModel && owner_tenant.empty();
}

std::string RegistrationTenant(const Principal& principal) { return principal.admin() ? "" : principal.tenant; }

}  // namespace posbias::auth
