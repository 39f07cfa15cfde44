#include "server/jacobian/allocator.h"

#include <atomic>
#include <climits>
#include <mutex>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace posbias::jacobian {
namespace {

std::atomic<bool> retaining{false};
std::mutex mapping_mutex;
int mapping_measurements = 0;  // Guarded by mapping_mutex.

constexpr int kLargeBlockBytes = 1 << 20;  // Every row-sized block (the block loops reuse theirs).
constexpr int kTrimBytes = 128 << 10;        // glibc's default M_TRIM_THRESHOLD.

void SetRetention(bool retain) {
#if defined(__GLIBC__)
  if (retain) {
    mallopt(M_MMAP_MAX, 0);              // Large blocks from the heap (glibc still maps when it must).
    mallopt(M_TRIM_THRESHOLD, INT_MAX);  // Freed memory stays for the next temporary.
  } else {
    mallopt(M_MMAP_MAX, 1 << 16);                  // glibc's default count of mapped blocks.
    mallopt(M_MMAP_THRESHOLD, kLargeBlockBytes);   // Blocks from 1 MiB mapped, unmapped when freed.
    mallopt(M_TRIM_THRESHOLD, kTrimBytes);         // The heap's free top goes back as by default.
  }
#else
  (void)retain;
#endif
}

}  // namespace

void RetainFreedMemoryDuringMeasurements() {
  std::lock_guard<std::mutex> lock(mapping_mutex);
  retaining = true;
  if (mapping_measurements == 0) SetRetention(true);
}

void ReturnFreeMemory() {
#if defined(__GLIBC__)
  if (retaining) malloc_trim(0);
#endif
}

LargeBlocksMapped::LargeBlocksMapped(bool active) : active_(active) {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mapping_mutex);
  if (mapping_measurements++ == 0) SetRetention(false);
#if defined(__GLIBC__)
  if (retaining) malloc_trim(0);  // What earlier measurements left in the heap goes first.
#endif
}

LargeBlocksMapped::~LargeBlocksMapped() {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mapping_mutex);
  if (--mapping_measurements == 0 && retaining) SetRetention(true);
}

}  // namespace posbias::jacobian
