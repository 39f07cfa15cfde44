// Who is calling, and may they: the door every RPC goes through before its work runs.
//
// Admit reads the call's "authorization" header and, with mTLS, the names of the verified client
// certificate (its subject CN, then its SANs), asks the Authenticator (auth/authenticator.h) for
// the principal and checks the method's role (auth/method_rules.h): UNAUTHENTICATED with reason
// AUTHENTICATION_REQUIRED, or PERMISSION_DENIED with reason ROLE_REQUIRED naming the role needed.
// The Caller it returns is what handlers use for tenancy: a tenant's principals see its own jobs
// and models (and public ones); another tenant's resource is NOT_FOUND, as if it did not exist.
// Audit writes one structured log line per call of a mutating method.
#pragma once

#include <string>
#include <string_view>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"
#include "server/auth/authenticator.h"
#include "server/auth/method_rules.h"

namespace posbias::service {

struct Caller {
  auth::Principal principal = auth::AnonymousAdmin();
  std::string method;
  bool mutating = false;
  std::string resource;  // Set by the handler (a job id, a model name) for the audit line.

  const std::string& tenant() const { return principal.tenant; }
  // Whether a resource of `tenant` is visible to this caller ("" models of an admin are public).
  bool Sees(const std::string& owner_tenant) const { return principal.admin() || owner_tenant == principal.tenant; }
};

class CallAuth {
 public:
  // `authenticator` outlives this; nullptr = authentication off (every caller the anonymous admin).
  explicit CallAuth(const auth::Authenticator* authenticator) : authenticator_(authenticator) {}

  absl::StatusOr<Caller> Admit(grpc::ServerContextBase* context, std::string_view method) const;
  // One line for a mutating call (principal, tenant, method, resource, outcome); nothing otherwise.
  static void Audit(const Caller& caller, const absl::Status& outcome);

 private:
  const auth::Authenticator* authenticator_;
};

// NOT_FOUND as the resource's own lookup would answer it: what another tenant's resource looks like.
absl::Status HiddenJob(const std::string& id);
absl::Status HiddenModel(const std::string& name);

}  // namespace posbias::service
