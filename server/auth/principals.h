// Who may call: principals with a tenant and roles, read from the tokens file.
//
// The tokens file (--auth-tokens-file) is JSON:
//   {"principals": [{"name": "alice", "tenant": "lab-a", "roles": ["submitter"],
//                    "token_sha256": "<64 hex>", "max_queued_jobs": 50, "max_running_jobs": 4}]}
// A principal names exactly one credential: `token_sha256` (the SHA-256 of the bearer token a
// client sends as "authorization: Bearer <token>"; the file never holds a token itself),
// `cert_subject` (with mTLS: the client certificate's subject CN, and only the CN) or `cert_san`
// ({"type": "dns"|"uri"|"email", "value": "..."}: one subject alternative name of that type). A
// certificate that matches two principals is refused, never given the first. Job quotas are per
// principal; 0 or absent = no limit.
//
// Roles nest: reader (density RPCs, presets, the tenant's models, jobs and results) ⊂ submitter
// (+ submit, cancel, delete the tenant's jobs) ⊂ operator (+ register, upload, export, delete the
// tenant's models) ⊂ admin (everything, every tenant).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::auth {

enum class Role { kReader = 1, kSubmitter = 2, kOperator = 3, kAdmin = 4 };

std::string_view RoleName(Role role);  // "reader", ...
absl::StatusOr<Role> ParseRole(std::string_view name);

// The kinds of subject alternative name a principal may match.
enum class SanType { kDns, kUri, kEmail };
std::string_view SanTypeName(SanType type);  // "dns", "uri", "email"

struct CertificateSan {
  SanType type = SanType::kDns;
  std::string value;
  bool operator==(const CertificateSan&) const = default;
};

// What the TLS layer verified of a client certificate: its subject CN and its SANs by type.
struct CertificateNames {
  std::string common_name;
  std::vector<CertificateSan> sans;
  bool empty() const { return common_name.empty() && sans.empty(); }
};

struct Principal {
  std::string name;
  std::string tenant;
  Role role = Role::kReader;  // The highest role the file gives it.
  std::string token_sha256;   // Lowercase hex; "" for a certificate principal.
  std::string cert_subject;   // The certificate's CN; "" unless the principal matches by CN.
  std::optional<CertificateSan> cert_san;  // One SAN of a type; unset unless it matches by SAN.
  int64_t max_queued_jobs = 0;   // 0 = no limit.
  int64_t max_running_jobs = 0;  // 0 = no limit.

  bool Has(Role needed) const { return static_cast<int>(role) >= static_cast<int>(needed); }
  bool admin() const { return role == Role::kAdmin; }
};

// The principals of a tokens file's text; INVALID_ARGUMENT naming the entry and field at fault
// (unknown keys, bad names, unknown roles, a malformed hash, two credentials or none, a name,
// hash or subject used twice). Never echoes a hash back in a message.
absl::StatusOr<std::vector<Principal>> ParsePrincipals(std::string_view json_text);

// Tenants and principal names: 1..63 characters of [a-z0-9._-], starting with a letter or digit.
bool IsValidName(std::string_view name);

}  // namespace posbias::auth
