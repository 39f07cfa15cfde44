#include "server/jacobian/allocator.h"

#include <sys/mman.h>

#include <atomic>
#include <climits>
#include <cstdint>
#include <mutex>

#include <c10/core/CPUAllocator.h>
#include <c10/core/impl/alloc_cpu.h>

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

// ---- Torch's CPU allocator: huge pages for large blocks while measurements map them ----------

std::atomic<bool> mapping_active{false};  // mapping_measurements > 0, read without the mutex.

constexpr uintptr_t kPageBytes = 4096;
constexpr uintptr_t kHugePageBytes = uintptr_t{2} << 20;  // x86-64's transparent huge page.
// Before each block's data: where its memory starts and, for a mapped block, how much is mapped
// (0: from the heap). 64 bytes keep the data at c10's alignment.
struct BlockHeader {
  void* base;
  size_t mapped_bytes;
};
constexpr size_t kHeaderBytes = 64;

uintptr_t RoundUp(uintptr_t value, uintptr_t to) { return (value + to - 1) / to * to; }

void FreeBlock(void* data) {
  if (data == nullptr) return;
  const auto* header = reinterpret_cast<const BlockHeader*>(static_cast<char*>(data) - kHeaderBytes);
  if (header->mapped_bytes == 0) {
    c10::free_cpu(header->base);
  } else {
    munmap(header->base, header->mapped_bytes);
  }
}

// A block of n bytes (and its header) mapped from a huge-page boundary and advised to use huge
// pages: faulted in 2 MiB at a time instead of 4 KiB, a quarter of a windowed measurement's time
// at L = 4096. Only whole huge pages inside the block get one, so it holds no more than its pages.
// nullptr when the system refuses the mapping.
char* MapWithHugePages(size_t n) {
  const uintptr_t bytes = RoundUp(n + kHeaderBytes, kPageBytes);
  void* mapped = mmap(nullptr, bytes + kHugePageBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapped == MAP_FAILED) return nullptr;
  const auto first = reinterpret_cast<uintptr_t>(mapped);
  const uintptr_t start = RoundUp(first, kHugePageBytes);
  if (start > first) munmap(mapped, start - first);  // The slop before the boundary and after the block.
  if (first + kHugePageBytes > start) munmap(reinterpret_cast<void*>(start + bytes), first + kHugePageBytes - start);
  (void)madvise(reinterpret_cast<void*>(start), bytes, MADV_HUGEPAGE);  // Advice: refused, pages stay small.
  auto* header = reinterpret_cast<BlockHeader*>(start);
  *header = BlockHeader{header, bytes};
  return reinterpret_cast<char*>(start) + kHeaderBytes;
}

// Torch's CPU tensors: blocks of at least a huge page mapped with huge pages while a measurement
// maps its large blocks (LargeBlocksMapped), every other block from c10's own heap allocation.
class TensorAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t n) const override {
    const c10::Device cpu(c10::DeviceType::CPU);
    if (n == 0) return {nullptr, nullptr, &FreeBlock, cpu};
    char* data = n >= kHugePageBytes && mapping_active.load(std::memory_order_relaxed) ? MapWithHugePages(n) : nullptr;
    if (data == nullptr) {
      void* base = c10::alloc_cpu(n + kHeaderBytes);  // c10's out-of-memory error when it cannot.
      *static_cast<BlockHeader*>(base) = BlockHeader{base, 0};
      data = static_cast<char*>(base) + kHeaderBytes;
    }
    return {data, data, &FreeBlock, cpu};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &FreeBlock; }
};

// Once per process, before the first measurement that maps: tensors allocated before keep their
// own deleters.
void InstallTensorAllocator() {
  static std::once_flag installed;
  std::call_once(installed, [] {
    static TensorAllocator allocator;
    c10::SetCPUAllocator(&allocator, /*priority=*/1);
  });
}

}  // namespace

void RetainFreedMemoryDuringMeasurements() {
  InstallTensorAllocator();
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
  InstallTensorAllocator();
  std::lock_guard<std::mutex> lock(mapping_mutex);
  if (mapping_measurements++ == 0) SetRetention(false);
  mapping_active = true;
#if defined(__GLIBC__)
  if (retaining) malloc_trim(0);  // What earlier measurements left in the heap goes first.
#endif
}

LargeBlocksMapped::~LargeBlocksMapped() {
  if (!active_) return;
  std::lock_guard<std::mutex> lock(mapping_mutex);
  if (--mapping_measurements == 0) {
    mapping_active = false;
    if (retaining) SetRetention(true);
  }
}

}  // namespace posbias::jacobian
