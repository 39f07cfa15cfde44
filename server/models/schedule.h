// How the model's own reverse pass schedules its work: the attention's block sizes in both passes
// and when the MLP goes through its per-position Jacobians. Torch-free and header-only, so that the
// pass (reverse_pass.cc) and the planner that predicts its memory (jacobian/batch_plan.cc) read one
// rule: the planner chooses the blocks (PlanAttentionBlocks), the pass uses what it is given and
// falls back to the same CPU rule when called without a plan.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace posbias::models {

// Positions per attention block when none is asked for: 256 x 256 scores per head and row fit a
// core's L2 cache in float32 (256 KiB).
inline constexpr int64_t kDefaultAttentionBlock = 256;

// Attention blocks per heartbeat (GradientOptions::between_blocks, ReversePassOptions's): a query
// block's row of key blocks is split into groups of this many, so that the time between two
// heartbeats stays bounded as L grows (64 blocks of 256 keys: 16,384 keys).
inline constexpr int64_t kBlocksPerHeartbeat = 64;

// Elements of one reverse block's probabilities for all rows of a product on the CPU (heads x rows
// x block^2): 4 Mi, 16 MiB in float32, measured on the CI machine kind (llama, L = 8192, K = 8).
inline constexpr double kCpuReverseBlockElements = 4.0 * (1 << 20);

// Largest block side on CUDA: 2048 x 2048 scores per head keep every product large enough for the
// device while a block pair's launch overhead stays small against its work.
inline constexpr int64_t kMaxCudaAttentionBlock = 2048;

// The reverse pass's block on the CPU for `rows` cotangent rows of `heads` query heads: heads x
// rows x block^2 near kCpuReverseBlockElements, a multiple of 16 from 16 to kDefaultAttentionBlock,
// at most L.
inline int64_t CpuReverseAttentionBlock(int64_t heads, int64_t rows, int64_t length) {
  const double side = std::sqrt(kCpuReverseBlockElements / static_cast<double>(std::max<int64_t>(1, heads * rows)));
  const int64_t block = std::clamp<int64_t>(static_cast<int64_t>(side) / 16 * 16, 16, kDefaultAttentionBlock);
  return std::max<int64_t>(1, std::min(block, length));
}

// Bytes of the reverse pass's block scratch (reverse_pass.cc, BlockScratch): the scores or
// probabilities, dP for every row, and the small products, in the statistics' dtype.
inline double ReverseBlockScratchBytes(int64_t heads, int64_t rows, int64_t block, int64_t stats_bytes) {
  return (static_cast<double>(rows) + 2.0) * static_cast<double>(heads) * static_cast<double>(block) *
         static_cast<double>(block) * static_cast<double>(stats_bytes);
}

// Bytes of the forward's block temporaries for one block pair: scores, their exponentials, the
// mask and the running statistics' update, about four [heads, block, block] tensors.
inline double ForwardBlockScratchBytes(int64_t heads, int64_t block, int64_t stats_bytes) {
  return 4.0 * static_cast<double>(heads) * static_cast<double>(block) * static_cast<double>(block) *
         static_cast<double>(stats_bytes);
}

struct AttentionBlocks {
  int64_t forward = kDefaultAttentionBlock;  // Query and key positions per block of the forward.
  int64_t reverse = kDefaultAttentionBlock;  // ... of the reverse, shared by all rows of a product.
};

// The blocks of a pass over L positions with `rows` cotangent rows per product. CPU: cache-sized
// (the forward's kDefaultAttentionBlock, the reverse's CpuReverseAttentionBlock). CUDA:
// memory-sized: the largest multiple of 64 up to kMaxCudaAttentionBlock whose scratch fits
// `scratch_bytes` (what the plan leaves free), never below the CPU's blocks.
inline AttentionBlocks PlanAttentionBlocks(int64_t heads, int64_t rows, int64_t length, bool on_cuda,
                                           double scratch_bytes, int64_t stats_bytes) {
  AttentionBlocks blocks;
  const int64_t l = std::max<int64_t>(1, length);
  blocks.forward = std::min(kDefaultAttentionBlock, l);
  blocks.reverse = CpuReverseAttentionBlock(heads, rows, l);
  if (!on_cuda) return blocks;
  const double h = static_cast<double>(std::max<int64_t>(1, heads)), s = static_cast<double>(stats_bytes);
  const auto side = [&](double per_square) {
    const double fit = std::sqrt(std::max(0.0, scratch_bytes) / per_square);
    return std::clamp<int64_t>(static_cast<int64_t>(std::min(fit, 1e9)) / 64 * 64, 0, kMaxCudaAttentionBlock);
  };
  blocks.forward = std::min(std::max(blocks.forward, side(4.0 * h * s)), l);
  blocks.reverse = std::min(std::max(blocks.reverse, side((static_cast<double>(rows) + 2.0) * h * s)), l);
  return blocks;
}

// Whether K rows go through the MLP faster as its per-position Jacobians C_i (d x d, formed once:
// d^2 m per position, then K d^2 to apply) than as K row products (2 d m each, 3 d m for SwiGLU),
// with a 20 % margin for the forming's extra memory traffic.
inline bool MlpJacobiansPay(int64_t rows, int64_t width, int64_t mlp_width, bool swiglu) {
  const double k = static_cast<double>(rows), d = static_cast<double>(width), m = static_cast<double>(mlp_width);
  const double row_products = (swiglu ? 3.0 : 2.0) * k * d * m;
  const double jacobians = d * d * m + k * d * d;
  return jacobians < 0.8 * row_products;
}

}  // namespace posbias::models
