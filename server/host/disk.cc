#include "server/host/disk.h"

#include <sys/statvfs.h>

namespace posbias::host {

int64_t AvailableDiskBytes(const std::string& path) {
  struct statvfs facts {};
  if (::statvfs(path.c_str(), &facts) != 0) return -1;
  return static_cast<int64_t>(facts.f_bavail) * static_cast<int64_t>(facts.f_frsize);
}

}  // namespace posbias::host
