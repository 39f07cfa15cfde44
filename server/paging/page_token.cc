#include "server/paging/page_token.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "server/ids/random_id.h"
#include "server/registry/sha256.h"
#include "server/status/error.h"

namespace posbias::paging {
namespace {

constexpr std::string_view kVersion = "p2";
constexpr size_t kFingerprintBytes = 16;
constexpr size_t kMaxTokenChars = 4096;

std::mutex key_mutex;
std::string& Key() {
  static std::string key = ids::RandomHex(32);
  return key;
}

std::string Fingerprint(std::string_view listing, std::string_view filter, std::string_view cursor) {
  std::string material(listing);
  material.push_back('\0');
  material.append(filter);
  material.push_back('\0');
  material.append(cursor);
  std::string key;
  {
    std::lock_guard lock(key_mutex);
    key = Key();
  }
  return registry::HmacSha256Hex(key, material).substr(0, 2 * kFingerprintBytes);
}

absl::Status NotOurs(std::string_view token, const std::string& why) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "page_token", std::string(token.substr(0, 64)),
                               absl::StrCat("the next_page_token of the previous page of the same request (", why,
                                            "); leave it empty for the first page")});
}

}  // namespace

void SetPageTokenKey(std::string key) {
  std::lock_guard lock(key_mutex);
  Key() = std::move(key);
}

absl::StatusOr<std::string> LoadOrCreatePageTokenKey(const std::string& path) {
  const auto unusable = [&](const std::string& why) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotFound,
                           absl::StrCat("the page-token key ", path, " ", why));
  };
  const std::string fresh = ids::RandomHex(32);
  if (const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600); fd >= 0) {
    const bool written = ::write(fd, fresh.data(), fresh.size()) == static_cast<ssize_t>(fresh.size()) && ::fsync(fd) == 0;
    ::close(fd);
    if (!written) return unusable("could not be written");
    return fresh;
  } else if (errno != EEXIST) {
    return unusable("could not be created");
  }
  // Another process made it: its key, once complete (it is written in one write of 64 bytes).
  for (int attempt = 0; attempt < 50; ++attempt) {
    std::ifstream in(path, std::ios::binary);
    std::string key((std::istreambuf_iterator<char>(in)), {});
    if (key.size() == fresh.size()) return key;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return unusable("is not 64 hex digits");
}

std::string IssuePageToken(std::string_view listing, std::string_view filter, std::string_view cursor) {
  if (cursor.empty()) return "";
  std::string token;
  absl::WebSafeBase64Escape(absl::StrCat(std::string(kVersion), Fingerprint(listing, filter, cursor), std::string(cursor)),
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
  std::string cursor = plain.substr(header);
  if (plain.compare(kVersion.size(), 2 * kFingerprintBytes, Fingerprint(listing, filter, cursor)) != 0) {
    return NotOurs(token, "this token was issued for a different filter, or by another server");
  }
  return cursor;
}

}  // namespace posbias::paging
