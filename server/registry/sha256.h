// SHA-256 of bytes (OpenSSL): upload checksums and the weights hash of registered models.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace posbias::registry {

// SHA-256 over bytes fed in pieces (uploads are hashed while they arrive).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const char* data, size_t size);
  std::string HexDigest();  // Once, at the end.

 private:
  void* context_;  // EVP_MD_CTX.
};

// Hex HMAC-SHA-256 of `message` under `key` (RFC 2104): page tokens' authenticity.
std::string HmacSha256Hex(std::string_view key, std::string_view message);

// Hex SHA-256 of a file's bytes; PATH_NOT_FOUND when it cannot be read.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace posbias::registry
