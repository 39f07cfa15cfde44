// Which role each RPC needs, and which RPCs change state (and so are audited). One table for
// every method of posbias.v1; a method missing from it is refused (PERMISSION_DENIED) rather than
// open, and a test checks the table against the services' descriptors both ways. Health and
// reflection are gRPC's own services, outside this table: health is always open (probes).
#pragma once

#include <optional>
#include <string_view>
#include <utility>
#include <vector>

#include "server/auth/principals.h"

namespace posbias::auth {

struct MethodRule {
  Role role = Role::kAdmin;
  bool mutating = false;  // Changes state: one audit line per call.
};

// The rule of "/posbias.v1.Service/Method"; nullopt for a method the table does not know.
std::optional<MethodRule> RuleFor(std::string_view full_method);

// Every rule, by full method name.
const std::vector<std::pair<std::string_view, MethodRule>>& AllMethodRules();

}  // namespace posbias::auth
