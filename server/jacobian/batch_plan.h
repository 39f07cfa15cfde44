// How a measurement splits its cotangent rows into reverse passes, from the model's shape, the
// sequence length and a memory budget: a pure function (no torch, no device), so every choice the
// engine makes about memory can be unit-tested with numbers.
//
// Two reverse passes (engine.h): autograd keeps one batch row's activations per cotangent row, so
// the batch is budget / activations (at most kCpuBatchRows on the CPU); the model's own pass keeps
// one copy of the activations and then needs ReverseBytesPerRow per row of a product (about 4096
// product rows K_b L at a time on the CPU). Checkpointing keeps only the layer inputs (about 1/12
// of a row's activations) when a row's activations would not fit the budget.
#pragma once

#include <cstdint>

#include "server/models/config.h"
#include "server/models/schedule.h"

namespace posbias::jacobian {

// Activation checkpointing: kAuto turns it on when one row's activations exceed the budget.
enum class Checkpointing { kAuto, kOn, kOff };

struct BatchPlanInputs {
  models::ModelConfig config;
  int64_t length = 0;               // L.
  int64_t element_bytes = 4;        // Bytes per element of the compute dtype.
  int64_t rows_total = 0;           // Cotangent rows per sample and output (d, or the probes K).
  int64_t budget_bytes = 0;         // Memory the measurement may use.
  int64_t requested_batch = 0;      // Rows per backward pass the caller fixed; 0 = plan it.
  Checkpointing checkpointing = Checkpointing::kAuto;
  bool model_pass = false;          // The model's own reverse pass (else autograd).
  bool on_cuda = false;             // CPU batches are capped (memory traffic beats bigger products).
  int64_t norm_element_bytes = 4;   // Bytes per element of the squared norms' dtype.
  // The loss gradient. Through autograd every position's logits and float32 log-probabilities stay
  // in the graph (L x vocabulary each, per row), on top of the layers' activations; through the
  // model's pass (one row entering every position) the head's logits are formed in chunks of
  // kLossHeadChunkElements and its cotangent [L, d] is kept for the reverse.
  bool loss_over_positions = false;
};

struct BatchPlan {
  bool checkpoint = false;          // Recompute layers in the backward pass.
  int64_t kept_bytes = 0;           // Activations one row keeps (after checkpointing).
  int64_t batch = 1;                // Cotangent rows per backward pass (equal chunks).
  int64_t rows_per_call = 1;        // Model pass: rows per InputGradients call (>= batch).
  // Model pass: the attention's blocks (models::PlanAttentionBlocks): cache-sized on the CPU;
  // memory-sized on CUDA from what the kept activations and the rows leave of the budget.
  models::AttentionBlocks blocks;
};

// Autograd on the CPU: larger cotangent batches lose more to memory traffic and page faults than
// they gain from bigger matrix products (GPT-2 small at L = 128: 16 rows 9.0 s, 97 rows 13.4 s).
inline constexpr int64_t kCpuBatchRows = 16;
// The model's own pass on the CPU does best at about 4096 product rows K_b L on two cores (gpt2
// L = 128: K_b 16/32/64/128 -> 20.4/19.7/19.5/25.7 s; qwen2-0.5b L = 256: K_b 8/16/32/64 ->
// 9.9/10.1/10.7/11.7 s, 3-4 layers).
inline constexpr int64_t kCpuModelPassProductRows = 4096;
// At long L the attention dominates, and every row of a product shares each block's recomputed
// probabilities: at least this many rows per product (llama, 2 layers, width 64, L = 8192,
// Hutchinson K = 8 on two cores: 1 row per product 62.9 s, 8 rows 7.6 s).
inline constexpr int64_t kCpuModelPassMinRows = 8;

// The loss gradient through the model's pass forms the output head's logits for this many
// (positions x vocabulary) elements at a time.
inline constexpr int64_t kLossHeadChunkElements = int64_t{1} << 22;

// Bytes of activations one batch row keeps for autograd's backward pass (all layers).
// (The model's own pass keeps one copy for all rows: ModelPassBytes.)
int64_t ActivationBytesPerRow(const models::ModelConfig& config, int64_t length, int64_t element_bytes);
// The loss gradient (one row, through autograd over a family's dense attention), measured against
// the process's peak (tests/jacobian/memory_model_test.py). Its graph keeps per layer the
// attention probabilities, heads L^2, and the residual-stream and MLP tensors, L (12 d + 3 m).
int64_t LossGraphBytesPerLayer(const models::ModelConfig& config, int64_t length, int64_t element_bytes);
// What the loss gradient's peak adds to the graph it keeps: the larger of one layer's backward
// through its softmax (the gradients of the probabilities and of the scores, 2 heads L^2) and the
// loss head at the forward's end (the logits in the compute dtype, their log-softmax and its
// gradient in float32, float64 for a float64 measurement: L x vocabulary x (element + 8 or 16) bytes).
int64_t LossPeakBytes(const models::ModelConfig& config, int64_t length, int64_t element_bytes);
// Bytes the model's own reverse pass keeps for one sequence: every layer's saved tensors
// (models::ReversePassElementsPerLayer: linear in L) and the final norm's.
int64_t ModelPassBytes(const models::ModelConfig& config, int64_t length, int64_t element_bytes);
// Bytes one cotangent row holds at the peak of a layer of the model's own reverse pass
// (models::ReversePassElementsPerRow: the largest phase's tensors). The attention's blocks add
// their buffers whatever the rows (their side shrinks as rows grow; kAttentionBlockBytes bounds
// them, PredictMemory counts them).
int64_t ReverseBytesPerRow(const models::ModelConfig& config, int64_t length, int64_t element_bytes);
// Scratch of the attention's reverse pass on the CPU: P, dP and dS of one block for all rows of a
// product (about 4 Mi elements each, models::CpuReverseAttentionBlock), in float64 at most.
inline constexpr int64_t kAttentionBlockBytes = int64_t{3} * (int64_t{4} << 20) * 8;

BatchPlan PlanBatches(const BatchPlanInputs& inputs);

// The memory a measurement holds at its peak, predicted by part, in bytes: what posbias-measure
// reports beside the peak it measured (a test holds the two within 25 % from L = 1k to 32k), and
// what job admission weighs against the host (admission/job_admission.h). The own reverse pass:
//   weights + samples' embeddings + kept activations
//     + max(the forward's transients, the rows' reverse work + the attention's block scratch),
// each from the plan's rows (batch per product, rows_per_call per call). Autograd: the graph of
// every batch row (kept_bytes each) and the rows' gradients; the loss gradient: its graph
// (kept_bytes) and LossPeakBytes.
struct MemoryPrediction {
  int64_t weights = 0;      // Parameters in the compute dtype.
  int64_t inputs = 0;       // The measured sample's embeddings (one sample at a time).
  int64_t activations = 0;  // Kept for the reverse pass (BatchPlan::kept_bytes; autograd: x batch).
  int64_t transient = 0;    // The larger of the forward's temporaries and the rows' reverse work.
  int64_t total() const { return weights + inputs + activations + transient; }
};
MemoryPrediction PredictMemory(const BatchPlanInputs& inputs, const BatchPlan& plan, int64_t parameters);

}  // namespace posbias::jacobian
