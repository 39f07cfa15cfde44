#include "server/files/open_beneath.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <optional>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::files {
namespace fs = std::filesystem;
namespace {

constexpr int kOpenFlags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY;

bool Under(const std::string& root, const std::string& path) {
  return path == root || (path.size() > root.size() && path.compare(0, root.size(), root) == 0 &&
                          (root.back() == '/' || path[root.size()] == '/'));
}

// The path relative to the root, as given (no component resolved); nullopt when an absolute path
// is not lexically under the root.
std::optional<fs::path> RelativeToRoot(const Scope& scope, const std::string& path) {
  const fs::path given(path);
  if (!given.is_absolute()) return given;
  if (!Under(scope.root, path)) return std::nullopt;
  return given.lexically_relative(scope.root);
}

absl::Status LeadsOut(const Scope& scope, const std::string& shown) {
  return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kPathNotAllowed,
                         absl::StrCat(shown, " leads out of ", scope.name,
                                      " (through '..', an absolute path or a symlink whose target is outside it or "
                                      "missing); the files of a model must stay under ",
                                      scope.name));
}

absl::Status Missing(const Scope& scope, const std::string& shown) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kPathNotFound,
                         absl::StrCat(shown, " does not exist under ", scope.name));
}

absl::Status OsFailure(const std::string& shown, const char* action, int error) {
  if (error == ENOENT || error == ENOTDIR) {
    return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kPathNotFound,
                           absl::StrCat(shown, ": no such file"));
  }
  return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                         absl::StrCat(shown, ": cannot ", action, ": ",
                                      std::error_code(error, std::generic_category()).message()));
}

// The canonical path `path` names, one component at a time from the root, each symlink resolved
// and checked to stay beneath it: the canonical route of the header's step 2.
absl::StatusOr<std::string> Resolve(const Scope& scope, const std::string& path, const std::string& shown) {
  const std::optional<fs::path> relative = RelativeToRoot(scope, path);
  if (!relative) return LeadsOut(scope, shown);
  std::string at = scope.root;
  std::error_code error;
  for (const fs::path& part : *relative) {
    if (part.empty() || part == ".") continue;
    const fs::path next = fs::path(at) / part;
    struct stat link {};
    if (::lstat(next.c_str(), &link) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return Missing(scope, shown);
      return OsFailure(shown, "look up", errno);
    }
    struct stat target {};
    if (S_ISLNK(link.st_mode) && ::stat(next.c_str(), &target) != 0) return LeadsOut(scope, shown);  // Dangling.
    const fs::path resolved = fs::canonical(next, error);
    if (error) return LeadsOut(scope, shown);  // A loop, or a link that broke meanwhile.
    if (!Under(scope.root, resolved.string())) return LeadsOut(scope, shown);
    at = resolved.string();
  }
  return at;
}

// Where the open descriptor's file is, from /proc; "" when /proc cannot tell.
std::string ProcPathOf(int fd) {
  char buffer[4096];
  const std::string link = absl::StrCat("/proc/self/fd/", fd);
  const ssize_t size = ::readlink(link.c_str(), buffer, sizeof buffer - 1);
  return size > 0 ? std::string(buffer, static_cast<size_t>(size)) : "";
}

absl::StatusOr<OpenFile> Regular(int fd, const std::string& shown) {
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    return OsFailure(shown, "stat", error);
  }
  if (!S_ISREG(info.st_mode)) {
    ::close(fd);
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat(shown, " is not a regular file"));
  }
  return OpenFile(fd, info);
}

// Step 1 of the header: -1 when the kernel has no openat2 or refused (the canonical route decides).
int OpenWithKernelCheck(const Scope& scope, const std::string& path) {
  const std::optional<fs::path> relative = RelativeToRoot(scope, path);
  if (!relative || relative->empty()) return -1;
  const int root = ::open(scope.root.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return -1;
  struct open_how how {};
  how.flags = kOpenFlags;
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
  const long fd = ::syscall(SYS_openat2, root, relative->c_str(), &how, sizeof how);
  ::close(root);
  return fd < 0 ? -1 : static_cast<int>(fd);
}

}  // namespace

absl::StatusOr<Scope> Scope::Of(const std::string& directory, std::string name) {
  std::error_code error;
  const fs::path canonical = fs::canonical(directory, error);
  if (error || !fs::is_directory(canonical, error)) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotFound,
                           absl::StrCat(name, " is missing on this server"));
  }
  return Scope{canonical.string(), std::move(name)};
}

OpenFile::OpenFile(OpenFile&& other) noexcept : fd_(std::exchange(other.fd_, -1)), info_(other.info_) {}

OpenFile& OpenFile::operator=(OpenFile&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = std::exchange(other.fd_, -1);
    info_ = other.info_;
  }
  return *this;
}

OpenFile::~OpenFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::string ShownPath(const Scope& scope, const std::string& path) {
  if (!scope.walled()) return path;
  if (const std::optional<fs::path> relative = RelativeToRoot(scope, path)) {
    const std::string shown = relative->lexically_normal().string();
    return shown.empty() || shown == "." ? "./" : shown;
  }
  return fs::path(path).filename().string();
}

namespace {

// Opens a path beneath a walled scope (the file comment's two routes).
absl::StatusOr<OpenFile> OpenWalled(const Scope& scope, const std::string& path, const std::string& shown) {
  if (const int fd = OpenWithKernelCheck(scope, path); fd >= 0) return Regular(fd, shown);
  absl::StatusOr<std::string> canonical = Resolve(scope, path, shown);
  if (!canonical.ok()) return canonical.status();
  struct stat checked {};
  if (::stat(canonical->c_str(), &checked) != 0) return OsFailure(shown, "stat", errno);
  const int fd = ::open(canonical->c_str(), kOpenFlags | O_NOFOLLOW);
  if (fd < 0) return errno == ELOOP ? LeadsOut(scope, shown) : OsFailure(shown, "open", errno);
  absl::StatusOr<OpenFile> file = Regular(fd, shown);
  if (!file.ok()) return file.status();
  // The file opened is the file checked: a component swapped for a link between the check and
  // the open is caught here.
  const std::string opened = ProcPathOf(file->fd());
  if (file->info().st_dev != checked.st_dev || file->info().st_ino != checked.st_ino ||
      (!opened.empty() && !Under(scope.root, opened))) {
    return LeadsOut(scope, shown);
  }
  return file;
}

}  // namespace

absl::StatusOr<OpenFile> OpenBeneath(const Scope& scope, const std::string& path) {
  const std::string shown = ShownPath(scope, path);
  if (!scope.walled()) {
    const int fd = ::open(path.c_str(), kOpenFlags);
    if (fd < 0) return OsFailure(shown, "open", errno);
    return Regular(fd, shown);
  }
  absl::StatusOr<OpenFile> file = OpenWalled(scope, path, shown);
  if (!file.ok()) return file.status();
  // A hard link is a second name of one file, and nothing tells which name is the owner's: a
  // tenant could link another tenant's file (readable to it on the host) into its own folder.
  if (file->info().st_nlink > 1) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kPathNotAllowed,
                           absl::StrCat(shown, " has ", file->info().st_nlink, " hard links: a file under ", scope.name,
                                        " must have one name (a hard link could be another folder's file); copy it "
                                        "instead"));
  }
  return file;
}

absl::StatusOr<std::string> ReadBeneath(const Scope& scope, const std::string& path, uint64_t max_bytes) {
  absl::StatusOr<OpenFile> file = OpenBeneath(scope, path);
  if (!file.ok()) return file.status();
  if (file->size() > max_bytes) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat(ShownPath(scope, path), " has ", file->size(), " bytes; at most ", max_bytes));
  }
  std::string text(file->size(), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t got = ::read(file->fd(), text.data() + done, text.size() - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return OsFailure(ShownPath(scope, path), "read", errno);
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  text.resize(done);
  return text;
}

bool HasEntry(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0;
}

bool IsDirectoryBeneath(const Scope& scope, const std::string& path) {
  std::error_code error;
  if (!scope.walled()) return fs::is_directory(path, error);
  absl::StatusOr<std::string> canonical = Resolve(scope, path, "");
  return canonical.ok() && fs::is_directory(*canonical, error);
}

}  // namespace posbias::files
