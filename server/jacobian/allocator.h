// The C library's allocator during measurements (no torch: binaries include this at start-up).
//
// glibc maps every large block (above 32 MiB) afresh and unmaps it when freed, so each of the
// reverse pass's large temporaries is faulted in page by page again, about a tenth of a CPU
// measurement's time (gpt2-shaped, exact, 3 layers: 18.6 s -> 16.9 s without it). Retaining
// freed memory in the heap lets the next temporary reuse those pages; Measure hands free memory
// back to the system when it finishes.
#pragma once

namespace posbias::jacobian {

// Process-wide, once at start-up (posbias-measure, posbias-server): large blocks come from the
// heap and freed memory is not trimmed while measuring. A no-op without glibc.
void RetainFreedMemoryDuringMeasurements();

// Returns the heap's free memory to the system if RetainFreedMemoryDuringMeasurements was called
// (Measure does, when it finishes).
void ReturnFreeMemory();

}  // namespace posbias::jacobian
