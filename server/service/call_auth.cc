#include "server/service/call_auth.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

std::vector<std::string> CertificateNames(const grpc::ServerContextBase& context) {
  std::vector<std::string> names;
  const auto auth_context = context.auth_context();
  if (auth_context == nullptr || !auth_context->IsPeerAuthenticated()) return names;
  for (const char* property : {"x509_common_name", "x509_subject_alternative_name"}) {
    for (const auto& value : auth_context->FindPropertyValues(property)) names.emplace_back(value.data(), value.size());
  }
  return names;
}

}  // namespace

absl::StatusOr<Caller> CallAuth::Admit(grpc::ServerContextBase* context, std::string_view method) const {
  Caller caller;
  caller.method = std::string(method);
  const auto rule = auth::RuleFor(method);
  caller.mutating = rule.has_value() && rule->mutating;
  if (authenticator_ == nullptr || !authenticator_->required()) return caller;
  std::string authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) authorization.assign(it->second.data(), it->second.size());
  auto principal = authenticator_->Authenticate(authorization, CertificateNames(*context));
  if (!principal.ok()) return principal.status();
  caller.principal = *std::move(principal);
  if (!rule.has_value()) {
    return ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                           absl::StrCat(std::string(method), " has no access rule on this server"));
  }
  if (!caller.principal.Has(rule->role)) {
    return ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                           absl::StrCat(std::string(method), " needs the role ", std::string(auth::RoleName(rule->role)),
                                        "; principal ", caller.principal.name, " has ",
                                        std::string(auth::RoleName(caller.principal.role))));
  }
  return caller;
}

void CallAuth::Audit(const Caller& caller, const absl::Status& outcome) {
  if (!caller.mutating) return;
  spdlog::info("audit principal={} tenant={} method={} resource={} outcome={}", caller.principal.name,
               caller.principal.tenant.empty() ? "-" : caller.principal.tenant, caller.method,
               caller.resource.empty() ? "-" : caller.resource,
               outcome.ok() ? "OK" : absl::StatusCodeToString(outcome.code()));
}

absl::Status HiddenJob(const std::string& id) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kJobNotFound, absl::StrCat("job ", id, " does not exist"));
}

absl::Status HiddenModel(const std::string& name) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kModelNotFound,
                         absl::StrCat("no model named ", name));
}

}  // namespace posbias::service
