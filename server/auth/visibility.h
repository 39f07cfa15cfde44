// Tenancy, one rule for every resource: who sees a job or a model, and in which namespace a
// caller's new models land. The service asks here for jobs and models alike, so the two cannot
// drift apart.
//
// A resource belongs to a tenant (its owner's; "" for what an admin, or any caller of a server
// without authentication, made). An admin sees everything. Anyone else sees its own tenant's
// resources and, for models only, the public ones (tenant ""): built-in presets and what an
// admin registered. Jobs are never public.
#pragma once

#include <string>
#include <string_view>

#include "server/auth/principals.h"

namespace posbias::auth {

enum class ResourceKind { kJob, kModel };

bool Sees(const Principal& principal, ResourceKind kind, std::string_view owner_tenant);

// The tenant a principal's new model belongs to: "" (public) for an admin, its tenant otherwise.
std::string RegistrationTenant(const Principal& principal);

}  // namespace posbias::auth
