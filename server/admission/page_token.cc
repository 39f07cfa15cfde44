#include "server/admission/page_token.h"

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/registry/sha256.h"
#include "server/status/error.h"

namespace posbias::admission {
namespace {

constexpr std::string_view kVersion = "p1";
constexpr size_t kFingerprintBytes = 8;
constexpr size_t kMaxTokenChars = 4096;

std::string Fingerprint(std::string_view listing, std::string_view filter) {
  registry::Sha256 sha;
  const std::string material = absl::StrCat(std::string(listing), std::string(1, '\0'), std::string(filter));
  sha.Update(material.data(), material.size());
  return sha.HexDigest().substr(0, 2 * kFingerprintBytes);
}

absl::Status NotOurs(std::string_view token, const std::string& why) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "page_token", std::string(token.substr(0, 64)),
                               absl::StrCat("the next_page_token of the previous page of the same request (", why,
                                            "); leave it empty for the first page")});
}

}  // namespace

std::string IssuePageToken(std::string_view listing, std::string_view filter, std::string_view cursor) {
  if (cursor.empty()) return "";
  std::string token;
  absl::WebSafeBase64Escape(absl::StrCat(std::string(kVersion), Fingerprint(listing, filter), std::string(cursor)),
                            &token);
  return token;
}

absl::StatusOr<std::string> RedeemPageToken(std::string_view token, std::string_view listing,
                                            std::string_view filter) {
  if (token.empty()) return std::string();
  std::string plain;
  if (token.size() > kMaxTokenChars || !absl::WebSafeBase64Unescape(std::string(token), &plain)) {
    return NotOurs(token, "this is not a page token");
  }
  const size_t header = kVersion.size() + 2 * kFingerprintBytes;
  if (plain.size() <= header || plain.compare(0, kVersion.size(), kVersion) != 0) {
    return NotOurs(token, "this is not a page token");
  }
  if (plain.compare(kVersion.size(), 2 * kFingerprintBytes, Fingerprint(listing, filter)) != 0) {
    return NotOurs(token, "this token was issued for a different filter");
  }
  return plain.substr(header);
}

}  // namespace posbias::admission
