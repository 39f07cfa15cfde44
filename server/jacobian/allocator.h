// The C library's and torch's allocators during measurements (the header is torch-free: binaries
// include it at start-up).
//
// glibc maps every large block (above 32 MiB) afresh and unmaps it when freed, so each of the
// reverse pass's large temporaries is faulted in page by page again, about a tenth of a CPU
// measurement's time at short L (gpt2-shaped, exact, 3 layers: 18.6 s -> 16.9 s without it).
// Retaining freed memory in the heap lets the next temporary reuse those pages; Measure hands free
// memory back to the system when it finishes.
//
// At long L the same retention costs memory instead: the reverse pass's row-sized temporaries
// (K L d and K L m elements, of a dozen sizes) fragment a heap that never shrinks, and the
// process held 2-3x its live memory (llama, 2 layers, width 64, L = 32,768, K = 8: 3.3 GB for
// about 1.2 GB live), while the page faults it saves are a rounding error beside the O(L^2)
// attention. A measurement at long L therefore maps its large blocks again (LargeBlocksMapped):
// the process then holds what the pass holds, which the batch plan's memory model predicts.
// Meanwhile torch's CPU tensors of 2 MiB and more are mapped with transparent huge pages (advised,
// from a huge-page boundary), so that each is faulted in 2 MiB at a time rather than 4 KiB: a
// quarter of a windowed measurement's time at L = 4096 (docs/contributing/design-notes.md).
#pragma once

#include <cstdint>

namespace posbias::jacobian {

// Process-wide, once at start-up (posbias-measure, posbias-server): large blocks come from the
// heap and freed memory is not trimmed while measuring. A no-op without glibc.
void RetainFreedMemoryDuringMeasurements();

// Returns the heap's free memory to the system if RetainFreedMemoryDuringMeasurements was called
// (Measure does, when it finishes).
void ReturnFreeMemory();

// Sequences from this length on are measured with large blocks mapped (LargeBlocksMapped), and
// from kMapLargeBlocksPerWidth times the model's width where that is longer: the attention's
// O(L^2) work per position grows as L / d, and below about 8 d the row-sized products of the
// projections and the MLP dominate, whose fresh pages the kernel zeroes when mapped (qwen2-0.5b's
// shape, 4 layers, L = 2048, K = 8: 15 % of the time in clear_page and page faults).
inline constexpr int64_t kMapLargeBlocksFromLength = 2048;
inline constexpr int64_t kMapLargeBlocksPerWidth = 8;
inline bool MapsLargeBlocks(int64_t length, int64_t width) {
  return length >= kMapLargeBlocksFromLength && length >= kMapLargeBlocksPerWidth * width;
}

// While any instance lives (one per measurement at long L; concurrent measurements count), blocks
// of at least 1 MiB are mapped and unmapped again (every row-sized tensor: the attention's block
// loops reuse their buffers, so they do not pay for it) and the heap's free top is trimmed; when
// the last one ends, retention (if it was set) resumes. `active` false: does nothing. The cost is
// the page faults of fresh blocks: on this project's 2-core machine a windowed model (cheap
// attention) at L = 32,768 ran 7.1 s with retention and 12 s mapped, holding 1.13 GB and 0.88 GB.
class LargeBlocksMapped {
 public:
  explicit LargeBlocksMapped(bool active);
  ~LargeBlocksMapped();
  LargeBlocksMapped(const LargeBlocksMapped&) = delete;
  LargeBlocksMapped& operator=(const LargeBlocksMapped&) = delete;

 private:
  bool active_;
};

}  // namespace posbias::jacobian
