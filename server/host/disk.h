// Free disk space of the file system holding a path (statvfs), for writes that must not fill the
// data directory: uploads check it before they start and while they stream. Plain C++.
#pragma once

#include <cstdint>
#include <string>

namespace posbias::host {

// Bytes an unprivileged writer may still use on the file system of `path`; -1 when unknown.
int64_t AvailableDiskBytes(const std::string& path);

}  // namespace posbias::host
