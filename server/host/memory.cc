#include "server/host/memory.h"

#include <fstream>
#include <sstream>
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

ProcessMemory ReadProcessMemory() {
  ProcessMemory memory;
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    if (!(fields >> key >> kib)) continue;
    if (key == "VmRSS:") memory.resident_bytes = kib * 1024;
    if (key == "VmHWM:") memory.peak_resident_bytes = kib * 1024;
  }
  return memory;
}

bool ResetPeakResidentMemory() {
  std::ofstream clear_refs("/proc/self/clear_refs");
  clear_refs << "5";
  clear_refs.flush();
  return static_cast<bool>(clear_refs);
}

}  // namespace posbias::host
