#include "server/jacobian/allocator.h"

#include <atomic>
#include <climits>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

namespace posbias::jacobian {
namespace {
std::atomic<bool> retaining{false};
}  // namespace

void RetainFreedMemoryDuringMeasurements() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_MAX, 0);              // Large blocks from the heap (glibc still maps when it must).
  mallopt(M_TRIM_THRESHOLD, INT_MAX);  // Freed memory stays for the next temporary.
  retaining = true;
#endif
}

void ReturnFreeMemory() {
#if defined(__GLIBC__)
  if (retaining) malloc_trim(0);
#endif
}

}  // namespace posbias::jacobian
