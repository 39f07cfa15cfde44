// The host machine's memory, as the kernel reports it in /proc/meminfo: the one reader of that
// file, used by job admission (total memory, the CPU worker's device) and the Jacobian engine
// (available memory, for its batch budget). Plain C++.
#pragma once

#include <cstdint>

namespace posbias::host {

struct HostMemory {
  int64_t total_bytes = -1;      // MemTotal; -1 when unknown.
  int64_t available_bytes = -1;  // MemAvailable; -1 when unknown.
};

HostMemory ReadHostMemory();

}  // namespace posbias::host
