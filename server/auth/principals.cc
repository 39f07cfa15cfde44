#include "server/auth/principals.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/jsontext/bounded_json.h"
#include "server/status/error.h"

namespace posbias::auth {
namespace {

using Json = nlohmann::json;
constexpr size_t kMaxFileBytes = size_t{4} << 20;
constexpr int kMaxDepth = 8;

absl::Status Bad(const std::string& field, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, field, value, allowed});
}

bool IsLowerHex(std::string_view text) {
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

// The principal's one credential: a token's SHA-256, a certificate's CN or one of its SANs.
absl::Status ParseCredential(const Json& item, const std::string& where, Principal& principal) {
  const int credentials = static_cast<int>(item.contains("token_sha256")) + static_cast<int>(item.contains("cert_subject")) +
                          static_cast<int>(item.contains("cert_san"));
  if (credentials != 1) {
    return Bad(where, credentials == 0 ? "no credential" : "more than one credential",
               "exactly one of token_sha256 (SHA-256 of a bearer token), cert_subject (mTLS: the certificate's CN) "
               "and cert_san (mTLS: {\"type\": \"dns\"|\"uri\"|\"email\", \"value\": ...})");
  }
  if (item.contains("cert_san")) {
    const Json& san = item["cert_san"];
    const bool shaped = san.is_object() && san.size() == 2 && san.contains("type") && san["type"].is_string() &&
                        san.contains("value") && san["value"].is_string();
    const std::string type = shaped ? san["type"].get<std::string>() : "";
    const std::string value = shaped ? san["value"].get<std::string>() : "";
    CertificateSan parsed;
    bool known = false;
    for (SanType candidate : {SanType::kDns, SanType::kUri, SanType::kEmail}) {
      if (SanTypeName(candidate) == type) parsed.type = candidate, known = true;
    }
    if (!known || value.empty() || value.size() > 256) {
      return Bad(where + ".cert_san", san.dump().substr(0, 96),
                 "{\"type\": \"dns\"|\"uri\"|\"email\", \"value\": 1..256 bytes}");
    }
    parsed.value = value;
    principal.cert_san = std::move(parsed);
  } else if (item.contains("token_sha256")) {
    const Json& hash = item["token_sha256"];
    if (!hash.is_string() || hash.get<std::string>().size() != 64 || !IsLowerHex(hash.get<std::string>())) {
      return Bad(where + ".token_sha256", "not shown", "64 lowercase hex digits: the SHA-256 of the token");
    }
    principal.token_sha256 = hash.get<std::string>();
  } else {
    const Json& subject = item["cert_subject"];
    if (!subject.is_string() || subject.get<std::string>().empty() || subject.get<std::string>().size() > 256) {
      return Bad(where + ".cert_subject", subject.dump().substr(0, 64), "the client certificate's CN, 1..256 bytes");
    }
    principal.cert_subject = subject.get<std::string>();
  }
  return absl::OkStatus();
}

absl::StatusOr<Principal> ParseOne(const Json& item, const std::string& where) {
  if (!item.is_object()) return Bad(where, item.type_name(), "an object");
  static const std::set<std::string> kKeys = {"name", "tenant", "roles", "token_sha256", "cert_subject", "cert_san",
                                              "max_queued_jobs", "max_running_jobs"};
  for (const auto& [key, value] : item.items()) {
    if (kKeys.count(key) == 0) {
      return Bad(absl::StrCat(where, ".", key), "present",
                 "name, tenant, roles, token_sha256, cert_subject, cert_san, max_queued_jobs, max_running_jobs");
    }
  }
  Principal principal;
  for (const auto& [key, target] : {std::pair<const char*, std::string*>{"name", &principal.name},
                                    std::pair<const char*, std::string*>{"tenant", &principal.tenant}}) {
    if (!item.contains(key) || !item[key].is_string() || !IsValidName(item[key].get<std::string>())) {
      return Bad(absl::StrCat(where, ".", key), item.contains(key) ? item[key].dump() : "missing",
                 "1..63 characters of [a-z0-9._-], starting with a letter or digit");
    }
    *target = item[key].get<std::string>();
  }
  if (!item.contains("roles") || !item["roles"].is_array() || item["roles"].empty()) {
    return Bad(where + ".roles", item.contains("roles") ? item["roles"].dump() : "missing",
               "a non-empty list of reader, submitter, operator, admin");
  }
  bool any = false;
  for (size_t i = 0; i < item["roles"].size(); ++i) {
    const Json& name = item["roles"][i];
    auto role = name.is_string() ? ParseRole(name.get<std::string>()) : absl::InvalidArgumentError("");
    if (!role.ok()) {
      return Bad(absl::StrCat(where, ".roles[", i, "]"), name.dump(), "reader, submitter, operator or admin");
    }
    if (!any || static_cast<int>(*role) > static_cast<int>(principal.role)) principal.role = *role;
    any = true;
  }
  if (auto status = ParseCredential(item, where, principal); !status.ok()) return status;
  for (const auto& [key, target] : {std::pair<const char*, int64_t*>{"max_queued_jobs", &principal.max_queued_jobs},
                                    std::pair<const char*, int64_t*>{"max_running_jobs", &principal.max_running_jobs}}) {
    if (!item.contains(key)) continue;
    const Json& value = item[key];
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 1'000'000) {
      return Bad(absl::StrCat(where, ".", key), value.dump(), "an integer 0..1000000 (0 = no limit)");
    }
    *target = value.get<int64_t>();
  }
  return principal;
}

}  // namespace

std::string_view SanTypeName(SanType type) {
  switch (type) {
    case SanType::kDns: return "dns";
    case SanType::kUri: return "uri";
    case SanType::kEmail: return "email";
  }
  return "dns";
}

std::string_view RoleName(Role role) {
  switch (role) {
    case Role::kReader: return "reader";
    case Role::kSubmitter: return "submitter";
    case Role::kOperator: return "operator";
    case Role::kAdmin: return "admin";
  }
  return "reader";
}

absl::StatusOr<Role> ParseRole(std::string_view name) {
  for (Role role : {Role::kReader, Role::kSubmitter, Role::kOperator, Role::kAdmin}) {
    if (RoleName(role) == name) return role;
  }
  return Bad("role", std::string(name), "reader, submitter, operator or admin");
}

bool IsValidName(std::string_view name) {
  if (name.empty() || name.size() > 63) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alnum = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
    if (!alnum && (i == 0 || (c != '.' && c != '_' && c != '-'))) return false;
  }
  return true;
}

absl::StatusOr<std::vector<Principal>> ParsePrincipals(std::string_view json_text) {
  if (json_text.size() > kMaxFileBytes) {
    return Bad("tokens file", absl::StrCat(json_text.size(), " bytes"), absl::StrCat("at most ", kMaxFileBytes, " bytes"));
  }
  jsontext::ParseBounds bounds;  // Linear time, nesting bounded while parsing.
  bounds.max_depth = kMaxDepth;
  jsontext::Parsed parsed = jsontext::Parse(json_text, bounds);
  if (parsed.outcome == jsontext::ParseOutcome::kTooDeep) {
    return Bad("tokens file", "nested too deeply", absl::StrCat("at most ", kMaxDepth, " levels"));
  }
  const bool valid = parsed.outcome == jsontext::ParseOutcome::kOk;
  Json& root = parsed.value;
  if (!valid || !root.is_object() || !root.contains("principals") || !root["principals"].is_array()) {
    return Bad("tokens file", "not {\"principals\": [...]}", "a JSON object with a \"principals\" array");
  }
  std::vector<Principal> principals;
  std::set<std::string> names, credentials;
  for (size_t i = 0; i < root["principals"].size(); ++i) {
    const std::string where = absl::StrCat("principals[", i, "]");
    auto principal = ParseOne(root["principals"][i], where);
    if (!principal.ok()) return principal.status();
    if (!names.insert(principal->name).second) return Bad(where + ".name", principal->name, "a name used once");
    const std::string credential =
        !principal->token_sha256.empty() ? "token:" + principal->token_sha256
        : principal->cert_san.has_value()
            ? "san:" + std::string(SanTypeName(principal->cert_san->type)) + ":" + principal->cert_san->value
            : "cn:" + principal->cert_subject;
    if (!credentials.insert(credential).second) {
      return Bad(where, "a credential another principal has", "one principal per token, certificate CN or SAN");
    }
    principals.push_back(*std::move(principal));
  }
  return principals;
}

}  // namespace posbias::auth
