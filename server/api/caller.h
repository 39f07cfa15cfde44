// The caller of one RPC as its handler sees it: who (principal, tenant), which method, the
// resource for the audit line, and whether the client has gone away. No gRPC types, so handlers
// (the *_requests.h functions) and their tests need none. call_auth.h makes one per call.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "server/auth/authenticator.h"
#include "server/auth/visibility.h"

namespace posbias::api {

struct Caller {
  auth::Principal principal = auth::AnonymousAdmin();
  std::string method;
  bool audited = false;
  std::string resource;  // Set by the handler (a job id, a model name) for the audit line.
  // True once the client has cancelled the call or gone away; empty = never (a test's caller).
  std::function<bool()> client_gone;

  const std::string& tenant() const { return principal.tenant; }
  // Whether this caller sees a resource of `owner_tenant` (auth/visibility.h: the one rule).
  bool Sees(auth::ResourceKind kind, const std::string& owner_tenant) const {
    return auth::Sees(principal, kind, owner_tenant);
  }
  // Long computations poll this and stop (CANCELLED) when it turns true.
  bool Gone() const { return client_gone && client_gone(); }
};

// NOT_FOUND as the resource's own lookup would answer it: what another tenant's resource looks like.
absl::Status HiddenJob(const std::string& id);
absl::Status HiddenModel(const std::string& name);

}  // namespace posbias::api
