// The RPCs of posbias.v1 as the proto declares them: each method's policy (role, mutating,
// audited) read from its `(posbias.v1.policy)` option, and the method a request type belongs to.
//
// Built once from the generated descriptors (V1Methods); the server refuses to start when the
// build fails, which it does for an RPC without the option, with ACCESS_ROLE_UNSPECIFIED, with a
// mutating method that is not audited, or with a request type two RPCs share (handlers find their
// method by their request's type, so none names its method). The auth table, the audit decision
// and the metrics' method label all come from here.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <google/protobuf/descriptor.h>

#include "absl/status/statusor.h"
#include "server/api/v1_handlers.h"
#include "server/auth/method_rules.h"

namespace posbias::api {

class ApiMethods {
 public:
  // The methods of `services`, in descriptor order.
  static absl::StatusOr<ApiMethods> FromServices(const std::vector<const google::protobuf::ServiceDescriptor*>& services);

  const auth::MethodRules& rules() const { return rules_; }
  // "/posbias.v1.Service/Method" of the RPC whose request type is `request_type`; "" if none.
  std::string_view MethodFor(const google::protobuf::Descriptor* request_type) const;
  // Every full method name, in descriptor order.
  const std::vector<std::string>& names() const { return names_; }

 private:
  auth::MethodRules rules_;
  std::map<const google::protobuf::Descriptor*, std::string> by_request_;
  std::vector<std::string> names_;
};

// ApiMethods of V1Services() (server/api/v1_handlers.h, generated from the proto), built on first use; the status of that build.
const absl::StatusOr<ApiMethods>& V1Methods();

}  // namespace posbias::api
