#include "server/auth/method_rules.h"

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::auth {

absl::Status MethodRules::Add(std::string full_method, MethodRule rule) {
  if (rule.mutating && !rule.audited) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, full_method, "mutating, not audited",
                                 "every mutating method audited"});
  }
  if (!rules_.emplace(full_method, rule).second) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, full_method, "named twice", "one rule per method"});
  }
  return absl::OkStatus();
}

const MethodRule* MethodRules::Find(std::string_view full_method) const {
  const auto it = rules_.find(full_method);
  return it == rules_.end() ? nullptr : &it->second;
}

}  // namespace posbias::auth
