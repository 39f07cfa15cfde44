#include "server/auth/authenticator.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <sys/stat.h>

#include <cctype>
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

size_t Authenticator::principal_count() const {
  std::lock_guard lock(mutex_);
  return principals_->size();
}

absl::StatusOr<Principal> Authenticator::Authenticate(std::string_view authorization,
                                                      const std::vector<std::string>& certificate_names) const {
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
  if (!certificate_names.empty()) {
    for (const Principal& principal : *principals) {
      if (principal.cert_subject.empty()) continue;
      for (const std::string& name : certificate_names) {
        if (name == principal.cert_subject) return principal;
      }
    }
    if (options_.tokens_file.empty()) {  // mTLS alone: the CA is the authority.
      Principal holder = AnonymousAdmin();
      holder.name = certificate_names.front();
      return holder;
    }
    return Unauthenticated(absl::StrCat("no principal of the tokens file names the client certificate \"",
                                        certificate_names.front().substr(0, 128), "\""));
  }
  return Unauthenticated(
      "this server requires credentials: a bearer token (\"authorization: Bearer <token>\"; posbias --token) "
      "or a client certificate");
}

}  // namespace posbias::auth
