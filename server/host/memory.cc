#include "server/host/memory.h"

#include <fstream>
#include <string>

namespace posbias::host {

HostMemory ReadHostMemory() {
  HostMemory memory;
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  int64_t kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemTotal:") memory.total_bytes = kib * 1024;
    if (key == "MemAvailable:") memory.available_bytes = kib * 1024;
  }
  return memory;
}

}  // namespace posbias::host
