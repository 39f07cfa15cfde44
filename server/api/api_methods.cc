#include "server/api/api_methods.h"

#include "absl/strings/str_cat.h"
#include "posbias/v1/options.pb.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

absl::StatusOr<auth::Role> RoleFromProto(v1::AccessRole role) {
  switch (role) {
    case v1::ACCESS_ROLE_READER: return auth::Role::kReader;
    case v1::ACCESS_ROLE_SUBMITTER: return auth::Role::kSubmitter;
    case v1::ACCESS_ROLE_OPERATOR: return auth::Role::kOperator;
    case v1::ACCESS_ROLE_ADMIN: return auth::Role::kAdmin;
    default: break;
  }
  return absl::InvalidArgumentError(absl::StrCat("role ", v1::AccessRole_Name(role), " is not a policy"));
}

absl::Status PolicyError(const std::string& method, const std::string& what) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, method + " (posbias.v1.policy)", what,
                               "an option naming ACCESS_ROLE_READER, _SUBMITTER, _OPERATOR or _ADMIN"});
}

}  // namespace

absl::StatusOr<ApiMethods> ApiMethods::FromServices(
    const std::vector<const google::protobuf::ServiceDescriptor*>& services) {
  ApiMethods methods;
  for (const auto* service : services) {
    for (int i = 0; i < service->method_count(); ++i) {
      const auto* method = service->method(i);
      const std::string name = absl::StrCat("/", service->full_name(), "/", method->name());
      if (!method->options().HasExtension(v1::policy)) return PolicyError(name, "missing");
      const v1::MethodPolicy& policy = method->options().GetExtension(v1::policy);
      auto role = RoleFromProto(policy.role());
      if (!role.ok()) return PolicyError(name, std::string(role.status().message()));
      if (auto added = methods.rules_.Add(name, {*role, policy.mutating(), policy.audited()}); !added.ok()) return added;
      if (!methods.by_request_.emplace(method->input_type(), name).second) {
        return InvalidArgumentError({ErrorReason::kInvalidArgument, name,
                                     absl::StrCat("request type ", method->input_type()->full_name(),
                                                  " shared with ", methods.by_request_[method->input_type()]),
                                     "one request type per RPC"});
      }
      methods.names_.push_back(name);
    }
  }
  return methods;
}

std::string_view ApiMethods::MethodFor(const google::protobuf::Descriptor* request_type) const {
  const auto it = by_request_.find(request_type);
  return it == by_request_.end() ? std::string_view() : std::string_view(it->second);
}

const absl::StatusOr<ApiMethods>& V1Methods() {
  static const auto* methods = new absl::StatusOr<ApiMethods>(ApiMethods::FromServices(V1Services()));
  return *methods;
}

}  // namespace posbias::api
