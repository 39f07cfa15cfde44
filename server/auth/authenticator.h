// Who is calling: a bearer token or a verified client certificate, matched against the principals
// of the tokens file (principals.h). gRPC-free: the service layer hands in the request's
// "authorization" header and the names of the client certificate the TLS layer verified.
//
// Modes, chosen by the server's flags:
//  - neither a tokens file nor mTLS: authentication is off; every caller is the anonymous admin
//    of the default tenant "" (one user on a laptop, or a mesh that authenticates in front);
//  - a tokens file: every call names a principal by its token (or, with mTLS, its certificate);
//  - mTLS without a tokens file: every client whose certificate the CA signed is an admin of the
//    default tenant, named after the certificate's subject CN.
// Tokens are compared as SHA-256 digests in constant time, every principal's digest each time, and
// never logged. The file is re-read by Reload (SIGHUP) and ReloadIfChanged (a poll of the file's
// size, time and inode); a file that fails to parse keeps the principals already loaded, and a
// file that was removed revokes every principal (fail closed).
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <sys/types.h>
#include <vector>

#include "absl/status/statusor.h"
#include "server/auth/principals.h"

namespace posbias::auth {

class Authenticator {
 public:
  struct Options {
    std::string tokens_file;           // "" = no token principals.
    bool client_certificates = false;  // mTLS: the transport requires and verifies client certificates.
  };
  static absl::StatusOr<std::unique_ptr<Authenticator>> Open(const Options& options);

  // Whether calls must name a principal (a tokens file or mTLS).
  bool required() const { return !options_.tokens_file.empty() || options_.client_certificates; }

  // The caller, from its "authorization" header value ("" when absent) and the names of its
  // verified client certificate (empty without mTLS). UNAUTHENTICATED with reason
  // AUTHENTICATION_REQUIRED when it names no principal, or when the certificate matches more
  // than one (a principal's cert_subject is its CN, its cert_san one SAN of the named type).
  absl::StatusOr<Principal> Authenticate(std::string_view authorization, const CertificateNames& certificate) const;

  // Re-reads the tokens file. A missing file revokes every principal: NOT_FOUND. Any other error
  // (unreadable, unparsable) keeps the loaded principals and is returned.
  absl::Status Reload();
  // Reloads when the file changed on disk since the last (re)load; its status, OK when unchanged.
  absl::Status ReloadIfChanged();

  size_t principal_count() const;

  // The principal `held` (admitted earlier, e.g. by an open stream) as the tokens file loaded now
  // names it: the entry with the same name and credential, with its current role, tenant and
  // quotas. UNAUTHENTICATED when the file no longer has it (removed, or its credential changed).
  // Without a tokens file nothing is ever reloaded, and `held` stands.
  absl::StatusOr<Principal> Recheck(const Principal& held) const;

 private:
  explicit Authenticator(Options options) : options_(std::move(options)) {}
  struct FileStamp {
    bool operator==(const FileStamp&) const = default;
    long long mtime_ns = 0, size = 0;
    ino_t inode = 0;
  };
  FileStamp Stamp() const;

  Options options_;
  mutable std::mutex mutex_;
  std::shared_ptr<const std::vector<Principal>> principals_;  // Guarded by mutex_; swapped whole.
  FileStamp loaded_stamp_;
};

// The anonymous admin of the default tenant: the caller when authentication is off.
Principal AnonymousAdmin();

}  // namespace posbias::auth
