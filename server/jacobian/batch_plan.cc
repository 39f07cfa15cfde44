#include "server/jacobian/batch_plan.h"

#include <algorithm>
#include <cmath>

#include "server/models/architecture.h"

namespace posbias::jacobian {

int64_t ActivationBytesPerRow(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  const double bytes = static_cast<double>(config.num_layers + 1) * models::ActivationElementsPerLayer(config, length) *
                       static_cast<double>(element_bytes);
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(bytes, 9e18)));
}

int64_t LossGraphBytesPerLayer(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  const double positions = static_cast<double>(length);
  const double elements = static_cast<double>(config.num_heads) * positions * positions +
                          positions * (12.0 * static_cast<double>(config.hidden_size) +
                                       3.0 * static_cast<double>(config.intermediate_size));
  return static_cast<int64_t>(std::min(elements * static_cast<double>(element_bytes), 9e18));
}

int64_t LossPeakBytes(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  const double positions = static_cast<double>(length), e = static_cast<double>(element_bytes);
  const double softmax = 2.0 * static_cast<double>(config.num_heads) * positions * positions * e;
  const double stats = element_bytes == 8 ? 8.0 : 4.0;  // The log-softmax's dtype (float64 for float64).
  const double head = positions * static_cast<double>(config.vocab_size) * (e + 2.0 * stats);
  return static_cast<int64_t>(std::min(std::max(softmax, head), 9e18));
}

int64_t ModelPassBytes(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  // Every layer's kept tensors, then the final norm's normalized input and scale.
  const double final_norm = static_cast<double>(length) * static_cast<double>(config.hidden_size + 1);
  const double bytes = (static_cast<double>(config.num_layers) * models::ReversePassElementsPerLayer(config, length) +
                        final_norm) * static_cast<double>(element_bytes);
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(bytes, 9e18)));
}

int64_t ReverseBytesPerRow(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>(models::ReversePassElementsPerRow(config, length)) * element_bytes);
}

BatchPlan PlanBatches(const BatchPlanInputs& in) {
  BatchPlan plan;
  // The loss gradient's row through autograd: its graph and its peak's addition (LossPeakBytes).
  // Through the model's pass it is one row of that pass.
  const bool autograd_loss = in.loss_over_positions && !in.model_pass;
  const int64_t loss_layer = autograd_loss ? LossGraphBytesPerLayer(in.config, in.length, in.element_bytes) : 0;
  const int64_t row_bytes =
      autograd_loss ? in.config.num_layers * loss_layer + LossPeakBytes(in.config, in.length, in.element_bytes)
      : in.model_pass        ? ModelPassBytes(in.config, in.length, in.element_bytes)
                             : ActivationBytesPerRow(in.config, in.length, in.element_bytes);
  const int64_t budget = in.budget_bytes;
  plan.checkpoint = in.checkpointing == Checkpointing::kOn ||
                    (in.checkpointing == Checkpointing::kAuto && row_bytes > (in.model_pass ? budget / 2 : budget));
  // Checkpointed, autograd keeps about 1/12 of a row's activations; the own pass keeps each
  // layer's input and recomputes one layer at a time.
  const int64_t model_pass_checkpointed =
      (in.config.num_layers + 1) * in.length * in.config.hidden_size * in.element_bytes +
      static_cast<int64_t>(models::ReversePassElementsPerLayer(in.config, in.length)) * in.element_bytes;
  // The loss gradient checkpointed keeps each layer's input and, while one layer is recomputed,
  // that layer's graph.
  const int64_t loss_checkpointed = in.config.num_layers * in.length * in.config.hidden_size * in.element_bytes + loss_layer;
  plan.kept_bytes = autograd_loss ? (plan.checkpoint ? loss_checkpointed : in.config.num_layers * loss_layer)
                    : !plan.checkpoint     ? row_bytes
                    : in.model_pass        ? std::min(row_bytes, model_pass_checkpointed)
                                           : std::max<int64_t>(1, row_bytes / 12);
  const int64_t reverse_row = ReverseBytesPerRow(in.config, in.length, in.element_bytes);
  int64_t batch = in.requested_batch;
  if (batch == 0 && in.model_pass) {
    // One copy of the activations, then rows of reverse-pass work.
    batch = std::max<int64_t>(1, budget - plan.kept_bytes) / reverse_row;
    if (!in.on_cuda) {
      batch = std::min(batch, std::max<int64_t>(kCpuModelPassProductRows / in.length, kCpuModelPassMinRows));
    }
  } else if (batch == 0) {
    batch = budget / plan.kept_bytes;
    if (!in.on_cuda) batch = std::min(batch, kCpuBatchRows);
  }
  batch = std::clamp<int64_t>(batch, 1, in.rows_total);
  if (in.requested_batch == 0) {  // Equal chunks: 64 rows at most 36 become 32 + 32.
    const int64_t chunks = (in.rows_total + batch - 1) / batch;
    batch = (in.rows_total + chunks - 1) / chunks;
  }
  plan.batch = batch;
  // The model's own pass takes as many rows per call as memory allows (its gradients, in and out,
  // and the MLP's per-position Jacobians), so that exact norms (K = d) use the Jacobians.
  plan.rows_per_call = batch;
  if (in.model_pass && in.requested_batch == 0) {
    const int64_t call_row = 3 * in.length * in.config.hidden_size * in.element_bytes;  // In, out, MLP part.
    const int64_t fixed = plan.kept_bytes + batch * reverse_row + kAttentionBlockBytes;  // One row group; blocks.
    plan.rows_per_call = std::clamp<int64_t>((budget - fixed) / call_row, batch, in.rows_total);
  }
  if (in.model_pass) {
    // CUDA's blocks take half of what the activations and one product's rows leave.
    const double left = static_cast<double>(budget - plan.kept_bytes - batch * reverse_row);
    plan.blocks = models::PlanAttentionBlocks(in.config.num_heads, batch, in.length, in.on_cuda, left / 2.0,
                                              in.element_bytes == 8 ? 8 : 4);
  }
  return plan;
}

}  // namespace posbias::jacobian

namespace posbias::jacobian {
namespace {

int64_t Bytes(double bytes) { return static_cast<int64_t>(std::min(bytes, 9e18)); }

}  // namespace

MemoryPrediction PredictMemory(const BatchPlanInputs& in, const BatchPlan& plan, int64_t parameters) {
  const auto& c = in.config;
  const double length = static_cast<double>(in.length), d = static_cast<double>(c.hidden_size);
  const double m = static_cast<double>(c.intermediate_size), e = static_cast<double>(in.element_bytes);
  const double stats = in.element_bytes == 8 ? 8.0 : 4.0;  // Softmax and norm statistics.
  const double batch = static_cast<double>(plan.batch), per_call = static_cast<double>(plan.rows_per_call);
  MemoryPrediction memory;
  memory.weights = Bytes(static_cast<double>(parameters) * e);
  // One sample's embeddings at a time: the model's (float32), the kept float64 copy, the compute dtype's.
  memory.inputs = Bytes(length * d * (4.0 + 8.0 + e));
  // After a call: its gradients and their squares in the norms' dtype.
  const double accumulate = per_call * length * d * (e + static_cast<double>(in.norm_element_bytes));
  if (!in.model_pass) {
    memory.activations = Bytes(static_cast<double>(plan.kept_bytes) * batch);
    memory.transient = in.loss_over_positions
                           ? Bytes(std::max(static_cast<double>(LossPeakBytes(c, in.length, in.element_bytes)), accumulate))
                           : Bytes(accumulate);
    return memory;
  }
  memory.activations = plan.kept_bytes;
  // The forward's temporaries: one layer's MLP pre-activations, activation and the derivative's
  // terms at the MLP width (reverse_pass.cc, MlpForward), or one attention block pair's.
  const double forward = std::max(5.0 * length * m * stats,
                                  models::ForwardBlockScratchBytes(c.num_heads, plan.blocks.forward,
                                                                   static_cast<int64_t>(stats)));
  // A call of more rows than one product holds its rows in, out and through the MLP's Jacobians.
  const double call = per_call > batch ? 3.0 * per_call * length * d * e : 0.0;
  // The MLP's per-position Jacobians where they pay (models::MlpJacobiansPay): blocks of positions
  // whose forming matrices stay under 128 MiB (reverse_pass.cc), and the Jacobians themselves.
  const auto* architecture = models::ArchitectureOf(c.family);
  const bool swiglu = architecture != nullptr && models::IsGated(architecture->mlp);  // SwiGLU or GeGLU.
  double jacobians = 0.0;
  if (models::MlpJacobiansPay(plan.rows_per_call, c.hidden_size, c.intermediate_size, swiglu)) {
    const double positions = std::clamp(std::floor((128.0 * (1 << 20)) / (m * d * e)), 1.0, length);
    jacobians = positions * (m * d + d * d + per_call * d) * e;
  }
  // The block loop's reused buffers (models::ReverseBlockScratchBytes, the plan's block).
  const double scratch = models::ReverseBlockScratchBytes(c.num_heads, plan.batch, plan.blocks.reverse,
                                                          static_cast<int64_t>(stats));
  const double rows = batch * static_cast<double>(ReverseBytesPerRow(c, in.length, in.element_bytes));
  // The loss gradient: the head's logits for a chunk of positions (compute dtype, their
  // log-softmax and its gradient in the statistics' dtype) while its cotangent [L, d] is formed;
  // that cotangent and the one row made of it stay through the reverse.
  double head = 0.0, loss_cotangent = 0.0;
  if (in.loss_over_positions) {
    const double vocab = static_cast<double>(std::max<int64_t>(1, c.vocab_size));
    const double positions = std::clamp(std::floor(static_cast<double>(kLossHeadChunkElements) / vocab), 1.0, length);
    head = positions * vocab * (e + 3.0 * stats) + length * d * e;
    loss_cotangent = 2.0 * length * d * e;
  }
  // The MLP's Jacobians are formed before the row products start, so the two do not overlap.
  memory.transient = Bytes(std::max({forward, accumulate, head, call + std::max(jacobians, rows + scratch)}) +
                           loss_cotangent);
  return memory;
}

}  // namespace posbias::jacobian
