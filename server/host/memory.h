// The host machine's memory, as the kernel reports it in /proc/meminfo: the one reader of that
// file, used by job admission (total memory, the CPU worker's device) and the Jacobian engine
// (available memory, for its batch budget); and this process's resident memory and its peak
// (/proc/self/status), which posbias-measure reports beside the planner's prediction. Plain C++.
#pragma once

#include <cstdint>

namespace posbias::host {

struct HostMemory {
  int64_t total_bytes = -1;      // MemTotal; -1 when unknown.
  int64_t available_bytes = -1;  // MemAvailable; -1 when unknown.
};

HostMemory ReadHostMemory();

// This process's resident memory as /proc/self/status reports it: now (VmRSS) and its high-water
// mark (VmHWM); -1 when unknown.
struct ProcessMemory {
  int64_t resident_bytes = -1;
  int64_t peak_resident_bytes = -1;
};
ProcessMemory ReadProcessMemory();
// Starts the high-water mark afresh at the current resident memory (writes 5 to
// /proc/self/clear_refs, Linux 4.0 or later); false where the kernel does not allow it.
bool ResetPeakResidentMemory();

}  // namespace posbias::host
