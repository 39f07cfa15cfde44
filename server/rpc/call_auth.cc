#include "server/rpc/call_auth.h"

#include <utility>
#include <vector>

#include <grpc/grpc_security_constants.h>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"
#include "server/api/api.h"
#include "server/status/error.h"

namespace posbias::rpc {
namespace {

// The verified client certificate's CN and its SANs by type (gRPC's peer_dns, peer_uri and
// peer_email properties; IP SANs name no principal).
auth::CertificateNames CertificateNamesOf(const grpc::ServerContextBase& context) {
  auth::CertificateNames names;
  const auto auth_context = context.auth_context();
  if (auth_context == nullptr || !auth_context->IsPeerAuthenticated()) return names;
  for (const auto& value : auth_context->FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    if (names.common_name.empty()) names.common_name.assign(value.data(), value.size());
  }
  for (const auto& [property, type] : {std::pair{GRPC_PEER_DNS_PROPERTY_NAME, auth::SanType::kDns},
                                       std::pair{GRPC_PEER_URI_PROPERTY_NAME, auth::SanType::kUri},
                                       std::pair{GRPC_PEER_EMAIL_PROPERTY_NAME, auth::SanType::kEmail}}) {
    for (const auto& value : auth_context->FindPropertyValues(property)) {
      names.sans.push_back({type, std::string(value.data(), value.size())});
    }
  }
  return names;
}

}  // namespace

absl::StatusOr<api::Caller> CallAuth::Admit(grpc::ServerContextBase* context,
                                       const google::protobuf::Descriptor* request_type) const {
  api::Caller caller;
  const std::string_view method = methods_->MethodFor(request_type);
  caller.method = std::string(method);
  const auth::MethodRule* rule = methods_->rules().Find(method);
  caller.audited = rule != nullptr && rule->audited;
  if (authenticator_ == nullptr || !authenticator_->required()) return caller;
  std::string authorization;
  const auto& metadata = context->client_metadata();
  if (auto it = metadata.find("authorization"); it != metadata.end()) authorization.assign(it->second.data(), it->second.size());
  auto principal = authenticator_->Authenticate(authorization, CertificateNamesOf(*context));
  if (!principal.ok()) {
    NoteRefusal("unauthenticated", method, principal.status());
    return principal.status();
  }
  caller.principal = *std::move(principal);
  absl::Status refused;
  if (rule == nullptr) {
    refused = ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                              absl::StrCat(std::string(method), " has no access rule on this server"));
  } else if (!caller.principal.Has(rule->role)) {
    refused = ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                              absl::StrCat(std::string(method), " needs the role ", std::string(auth::RoleName(rule->role)),
                                           "; principal ", caller.principal.name, " has ",
                                           std::string(auth::RoleName(caller.principal.role))));
  }
  if (!refused.ok()) {
    NoteRefusal("role", method, refused);
    return refused;
  }
  return caller;
}

absl::Status CallAuth::Recheck(const api::Caller& caller) const {
  if (authenticator_ == nullptr || !authenticator_->required()) return absl::OkStatus();
  auto now = authenticator_->Recheck(caller.principal);
  if (!now.ok()) return now.status();
  const auth::MethodRule* rule = methods_->rules().Find(caller.method);
  if (rule == nullptr || !now->Has(rule->role)) {
    return ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                           absl::StrCat(caller.method, " needs the role ",
                                        rule == nullptr ? "(none: no access rule)" : std::string(auth::RoleName(rule->role)),
                                        "; principal ", now->name, " has ", std::string(auth::RoleName(now->role)),
                                        " since the tokens file was reloaded"));
  }
  if (now->tenant != caller.principal.tenant) {
    return ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                           absl::StrCat("principal ", now->name, " belongs to another tenant since the tokens file was reloaded"));
  }
  return absl::OkStatus();
}

absl::StatusOr<api::Caller> CallAuth::AdmitRequest(grpc::ServerContextBase* context,
                                              const google::protobuf::Message& request) const {
  auto caller = Admit(context, request.GetDescriptor());
  if (!caller.ok()) return caller;
  if (auto enums = api::CheckEnumValues(request); !enums.ok()) return enums;
  return caller;
}

std::string AuditQuoted(std::string_view value) {
  std::string out = "\"";
  size_t taken = 0;
  for (const char c : value) {
    if (taken == kMaxAuditValueBytes) {
      absl::StrAppend(&out, "...(", value.size(), " bytes)");
      break;
    }
    ++taken;
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20 || byte >= 0x7f) {  // Control bytes and anything not ASCII, as \xNN.
      absl::StrAppend(&out, "\\x", absl::Hex(byte, absl::kZeroPad2));
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

void CallAuth::NoteRefusal(const char* kind, std::string_view method, const absl::Status& status) const {
  if (metrics_ != nullptr) metrics_->AuthRefused(kind);
  const auto now = std::chrono::steady_clock::now();
  int64_t suppressed = 0;
  {
    std::lock_guard lock(refusal_mutex_);
    RefusalLog& log = refusal_logs_[kind];
    if (log.last != std::chrono::steady_clock::time_point{} && now - log.last < std::chrono::seconds(1)) {
      ++log.suppressed;
      return;
    }
    log.last = now;
    suppressed = std::exchange(log.suppressed, 0);
  }
  // The message names no token (the authenticator never puts one in); client strings are quoted.
  spdlog::warn("refused kind={} method={} status={} message={} not_logged_since_last={}", kind, AuditQuoted(method),
               absl::StatusCodeToString(status.code()), AuditQuoted(std::string(status.message())), suppressed);
}

void CallAuth::Audit(const api::Caller& caller, const absl::Status& outcome) {
  if (!caller.audited) return;
  // Principal and tenant names are validated ([a-z0-9._-]) and the method comes from the
  // descriptors; the resource is the client's string, so it is quoted and escaped.
  spdlog::info("audit principal={} tenant={} method={} resource={} outcome={}", caller.principal.name,
               caller.principal.tenant.empty() ? "-" : caller.principal.tenant, caller.method,
               AuditQuoted(caller.resource), outcome.ok() ? "OK" : absl::StatusCodeToString(outcome.code()));
}

}  // namespace posbias::rpc
