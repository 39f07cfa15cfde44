#include "server/registry/scratch_files.h"

#include <signal.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <filesystem>
#include <random>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace posbias::registry {
namespace fs = std::filesystem;
namespace {

constexpr std::array<std::string_view, 3> kKinds = {"staging", "export", "hash"};

const std::string& HostName() {
  static const std::string host = [] {
    char name[256] = {};
    if (gethostname(name, sizeof name - 1) != 0) name[0] = '\0';
    std::string text(name);
    for (char& c : text) {
      if (c == '~' || c == '/') c = '_';
    }
    return text;
  }();
  return host;
}

const std::string& ProcessToken() {
  static const std::string token = absl::StrCat(std::random_device{}(), std::random_device{}());
  return token;
}

bool IsScratchName(const std::string& file) {
  for (std::string_view kind : kKinds) {
    if (file.size() > kind.size() + 2 && file[0] == '.' && file.compare(1, kind.size(), kind) == 0 &&
        file[kind.size() + 1] == '-') {
      return true;
    }
  }
  return false;
}

bool ProcessRunning(pid_t pid) { return ::kill(pid, 0) == 0 || errno == EPERM; }

// Whether the owner named in `file` is known to be gone; false when it cannot be told.
bool OwnerGone(const std::string& file) {
  const std::vector<std::string> parts = absl::StrSplit(file, '~');
  if (parts.size() != 4 || parts[1] != HostName()) return false;
  int64_t pid = 0;
  if (!absl::SimpleAtoi(parts[2], &pid) || pid <= 0) return false;
  if (pid == ::getpid()) return parts[3].compare(0, ProcessToken().size(), ProcessToken()) != 0;
  return !ProcessRunning(static_cast<pid_t>(pid));
}

}  // namespace

std::string ScratchPath(const std::string& dir, std::string_view kind, std::string_view model) {
  static std::atomic<uint64_t> counter{0};
  return absl::StrCat(dir, "/.", std::string(kind), "-", std::string(model), "~", HostName(), "~", ::getpid(), "~",
                      ProcessToken(), ".", counter.fetch_add(1));
}

ScratchSweep RemoveStaleScratch(const std::string& dir, std::chrono::seconds max_age) {
  ScratchSweep sweep;
  std::error_code error;
  const auto now = fs::file_time_type::clock::now();
  for (fs::directory_iterator it(dir, error), end; !error && it != end; it.increment(error)) {
    const std::string file = it->path().filename().string();
    if (!IsScratchName(file) || !it->is_regular_file(error)) continue;
    const auto modified = fs::last_write_time(it->path(), error);
    const bool aged = !error && now - modified > max_age;
    if (!aged && !OwnerGone(file)) continue;
    const uintmax_t bytes = fs::file_size(it->path(), error);
    if (fs::remove(it->path(), error)) {
      ++sweep.files_removed;
      sweep.bytes_removed += error ? 0 : bytes;
    }
  }
  return sweep;
}

}  // namespace posbias::registry
