// Who is calling, and may they: the door every RPC goes through before its work runs.
//
// Admit finds the call's method from its request type (api/api_methods.h: each RPC's policy
// comes from its proto option), reads the call's "authorization" header and, with mTLS, the names of the verified client
// certificate (its subject CN, then its SANs), asks the Authenticator (auth/authenticator.h) for
// the principal and checks the method's role (auth/method_rules.h): UNAUTHENTICATED with reason
// AUTHENTICATION_REQUIRED, or PERMISSION_DENIED with reason ROLE_REQUIRED naming the role needed.
// The Caller it returns is what handlers use for tenancy: a tenant's principals see its own jobs
// and models (and public ones); another tenant's resource is NOT_FOUND, as if it did not exist.
// Audit writes one structured log line per call of an audited method.
#pragma once

#include <chrono>
#include <map>
#include <mutex>
#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "server/auth/authenticator.h"
#include "server/auth/method_rules.h"
#include "server/auth/visibility.h"
#include "server/metrics/metrics.h"
#include "server/api/api.h"

namespace posbias::rpc {

class CallAuth {
 public:
  // Both outlive this. `authenticator` nullptr = authentication off (every caller the anonymous
  // admin); `methods` is the API's table (V1Methods()).
  // `metrics` (may be nullptr) counts refusals.
  CallAuth(const auth::Authenticator* authenticator, const api::ApiMethods* methods, metrics::Metrics* metrics = nullptr)
      : authenticator_(authenticator), methods_(methods), metrics_(metrics) {}

  // The full name of the RPC whose request type this is ("" for none).
  std::string_view MethodFor(const google::protobuf::Descriptor* request_type) const {
    return methods_->MethodFor(request_type);
  }
  // Authenticates the call to the RPC of `request_type` and checks its role.
  absl::StatusOr<api::Caller> Admit(grpc::ServerContextBase* context, const google::protobuf::Descriptor* request_type) const;
  // Admit, then the request's enum values (api/enum_check.h).
  absl::StatusOr<api::Caller> AdmitRequest(grpc::ServerContextBase* context, const google::protobuf::Message& request) const;
  // Whether a call admitted earlier (an open stream) may go on under the tokens file loaded now:
  // UNAUTHENTICATED when its principal was revoked, PERMISSION_DENIED (ROLE_REQUIRED) when it
  // lost the method's role or moved to another tenant. OK without authentication.
  absl::Status Recheck(const api::Caller& caller) const;
  // One line for an audited call (principal, tenant, method, resource, outcome); nothing otherwise.
  static void Audit(const api::Caller& caller, const absl::Status& outcome);

 private:
  // A refused call: counted, and logged at most once per second per kind (with how many were
  // not logged since), so a flood of bad credentials cannot flood the log.
  void NoteRefusal(const char* kind, std::string_view method, const absl::Status& status) const;

  const auth::Authenticator* authenticator_;
  const api::ApiMethods* methods_;
  metrics::Metrics* metrics_;
  struct RefusalLog {
    std::chrono::steady_clock::time_point last{};
    int64_t suppressed = 0;
  };
  mutable std::mutex refusal_mutex_;
  mutable std::map<std::string, RefusalLog> refusal_logs_;
};

// An audit line's client string: in double quotes, `"` and `\` escaped with a backslash, control
// bytes and non-ASCII bytes as \xNN, cut after kMaxAuditValueBytes input bytes with the full size
// noted, so a value can neither end the line nor pose as another field.
inline constexpr size_t kMaxAuditValueBytes = 256;
std::string AuditQuoted(std::string_view value);

}  // namespace posbias::rpc
