#include "server/auth/authenticator.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::auth {
namespace {

std::string Sha256Hex(std::string_view text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_Digest(text.data(), text.size(), digest, &length, EVP_sha256(), nullptr);
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string hex;
  for (unsigned int i = 0; i < length; ++i) {
    hex.push_back(kDigits[digest[i] >> 4]);
    hex.push_back(kDigits[digest[i] & 0xf]);
  }
  return hex;
}

absl::Status Unauthenticated(const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kUnauthenticated, ErrorReason::kAuthenticationRequired, message);
}

// The token of "Bearer <token>" (the scheme in any case); "" when the header is not one.
std::string_view BearerToken(std::string_view header) {
  constexpr std::string_view kScheme = "bearer ";
  if (header.size() <= kScheme.size()) return {};
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(header[i])) != kScheme[i]) return {};
  }
  std::string_view token = header.substr(kScheme.size());
  while (!token.empty() && token.front() == ' ') token.remove_prefix(1);
  while (!token.empty() && token.back() == ' ') token.remove_suffix(1);
  return token;
}

}  // namespace

Principal AnonymousAdmin() {
  Principal anonymous;
  anonymous.name = "anonymous";
  anonymous.tenant = "";
  anonymous.role = Role::kAdmin;
  return anonymous;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Open(const Options& options) {
  std::unique_ptr<Authenticator> authenticator(new Authenticator(options));
  authenticator->principals_ = std::make_shared<const std::vector<Principal>>();
  if (!options.tokens_file.empty()) {
    if (auto status = authenticator->Reload(); !status.ok()) return status;
  }
  return authenticator;
}

Authenticator::FileStamp Authenticator::Stamp() const {
  struct stat facts {};
  if (::stat(options_.tokens_file.c_str(), &facts) != 0) return {};
  return {static_cast<long long>(facts.st_mtim.tv_sec) * 1'000'000'000 + facts.st_mtim.tv_nsec,
          static_cast<long long>(facts.st_size), facts.st_ino};
}

absl::Status Authenticator::Reload() {
  if (options_.tokens_file.empty()) return absl::OkStatus();
  const FileStamp stamp = Stamp();
  std::error_code missing;
  if (!std::filesystem::exists(options_.tokens_file, missing)) {
    // Fail closed: a removed file revokes every token (and every certificate principal).
    std::lock_guard lock(mutex_);
    principals_ = std::make_shared<const std::vector<Principal>>();
    loaded_stamp_ = stamp;
    return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kPathNotFound,
                           absl::StrCat("the tokens file ", options_.tokens_file, " is gone: every principal is revoked"));
  }
  std::ifstream in(options_.tokens_file, std::ios::binary);
  if (!in) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotFound,
                           absl::StrCat("cannot read the tokens file ", options_.tokens_file));
  }
  std::ostringstream text;
  text << in.rdbuf();
  auto principals = ParsePrincipals(text.str());
  if (!principals.ok()) {
    return absl::Status(principals.status().code(),
                        absl::StrCat("tokens file ", options_.tokens_file, ": ", principals.status().message()));
  }
  std::lock_guard lock(mutex_);
  principals_ = std::make_shared<const std::vector<Principal>>(*std::move(principals));
  loaded_stamp_ = stamp;
  return absl::OkStatus();
}

absl::Status Authenticator::ReloadIfChanged() {
  if (options_.tokens_file.empty()) return absl::OkStatus();
  {
    std::lock_guard lock(mutex_);
    if (Stamp() == loaded_stamp_) return absl::OkStatus();
  }
  return Reload();
}

absl::StatusOr<Principal> Authenticator::Recheck(const Principal& held) const {
  if (options_.tokens_file.empty()) return held;
  std::shared_ptr<const std::vector<Principal>> principals;
  {
    std::lock_guard lock(mutex_);
    principals = principals_;
  }
  for (const Principal& principal : *principals) {
    if (principal.name == held.name && principal.token_sha256 == held.token_sha256 &&
        principal.cert_subject == held.cert_subject && principal.cert_san == held.cert_san) {
      return principal;
    }
  }
  return Unauthenticated(absl::StrCat("principal ", held.name,
                                      " was revoked by the tokens file (removed, or its credential changed)"));
}

size_t Authenticator::principal_count() const {
  std::lock_guard lock(mutex_);
  return principals_->size();
}

absl::StatusOr<Principal> Authenticator::Authenticate(std::string_view authorization,
                                                      const CertificateNames& certificate) const {
  if (!required()) return AnonymousAdmin();
  std::shared_ptr<const std::vector<Principal>> principals;
  {
    std::lock_guard lock(mutex_);
    principals = principals_;
  }
  const std::string_view token = BearerToken(authorization);
  if (!token.empty()) {
    // Every digest is compared, whichever matches: the time taken says nothing about which.
    const std::string digest = Sha256Hex(token);
    const Principal* match = nullptr;
    for (const Principal& principal : *principals) {
      if (principal.token_sha256.size() != digest.size()) continue;
      if (CRYPTO_memcmp(principal.token_sha256.data(), digest.data(), digest.size()) == 0) match = &principal;
    }
    if (match != nullptr) return *match;
    return Unauthenticated("the bearer token is not one this server knows (mistyped, or revoked)");
  }
  if (!authorization.empty()) {
    return Unauthenticated("the authorization header is not \"Bearer <token>\"");
  }
  if (!certificate.empty()) {
    std::vector<const Principal*> matches;
    for (const Principal& principal : *principals) {
      const bool by_cn = !principal.cert_subject.empty() && principal.cert_subject == certificate.common_name;
      bool by_san = false;
      if (principal.cert_san.has_value()) {
        for (const CertificateSan& san : certificate.sans) by_san = by_san || san == *principal.cert_san;
      }
      if (by_cn || by_san) matches.push_back(&principal);
    }
    if (matches.size() == 1) return *matches.front();
    const std::string shown = (certificate.common_name.empty() ? std::string("(no CN)") : certificate.common_name).substr(0, 128);
    if (matches.size() > 1) {  // Never the first of several: the file must say which one it is.
      return Unauthenticated(absl::StrCat("the client certificate \"", shown, "\" matches ", matches.size(),
                                          " principals (", matches[0]->name, ", ", matches[1]->name,
                                          "); the tokens file must name it once"));
    }
    if (options_.tokens_file.empty()) {  // mTLS alone: the CA is the authority.
      Principal holder = AnonymousAdmin();
      holder.name = certificate.common_name.empty() ? certificate.sans.front().value : certificate.common_name;
      return holder;
    }
    return Unauthenticated(absl::StrCat("no principal of the tokens file names the client certificate \"", shown, "\""));
  }
  return Unauthenticated(
      "this server requires credentials: a bearer token (\"authorization: Bearer <token>\"; posbias --token) "
      "or a client certificate");
}

}  // namespace posbias::auth
