// What a call to one RPC requires and causes: the role it needs, whether it changes state, whether
// it is audited. The values come from each RPC's `(posbias.v1.policy)` option in the proto
// (proto/posbias/v1/options.proto); api/api_methods.h reads them from the descriptors at
// start-up into a MethodRules table. Health and reflection are gRPC's own services, outside the
// table: health is always open (probes).
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "server/auth/principals.h"

namespace posbias::auth {

struct MethodRule {
  Role role = Role::kAdmin;
  bool mutating = false;  // Changes state (a job, a model).
  bool audited = false;   // One audit line per call.
};

// Rules by full method name ("/posbias.v1.Service/Method"). A method the table does not know is
// refused (PERMISSION_DENIED) rather than open.
class MethodRules {
 public:
  // INVALID_ARGUMENT when a method is named twice or a mutating method is not audited.
  absl::Status Add(std::string full_method, MethodRule rule);
  // nullptr for a method the table does not know.
  const MethodRule* Find(std::string_view full_method) const;
  const std::map<std::string, MethodRule, std::less<>>& all() const { return rules_; }

 private:
  std::map<std::string, MethodRule, std::less<>> rules_;
};

}  // namespace posbias::auth
