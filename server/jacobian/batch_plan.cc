#include "server/jacobian/batch_plan.h"

#include <algorithm>

namespace posbias::jacobian {

int64_t ActivationBytesPerRow(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  const double bytes = static_cast<double>(config.num_layers + 1) * models::ActivationElementsPerLayer(config, length) *
                       static_cast<double>(element_bytes);
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(bytes, 9e18)));
}

int64_t ModelPassBytes(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  const double bytes = static_cast<double>(config.num_layers + 1) * models::ReversePassElementsPerLayer(config, length) *
                       static_cast<double>(element_bytes);
  return std::max<int64_t>(1, static_cast<int64_t>(std::min(bytes, 9e18)));
}

int64_t ReverseBytesPerRow(const models::ModelConfig& config, int64_t length, int64_t element_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>(models::ReversePassElementsPerRow(config, length)) * element_bytes);
}

BatchPlan PlanBatches(const BatchPlanInputs& in) {
  BatchPlan plan;
  const int64_t row_bytes = in.model_pass ? ModelPassBytes(in.config, in.length, in.element_bytes)
                                          : ActivationBytesPerRow(in.config, in.length, in.element_bytes);
  const int64_t budget = in.budget_bytes;
  plan.checkpoint = in.checkpointing == Checkpointing::kOn ||
                    (in.checkpointing == Checkpointing::kAuto && row_bytes > (in.model_pass ? budget / 2 : budget));
  // Checkpointed, autograd keeps about 1/12 of a row's activations; the own pass keeps each
  // layer's input and recomputes one layer at a time.
  const int64_t model_pass_checkpointed =
      (in.config.num_layers + 1) * in.length * in.config.hidden_size * in.element_bytes +
      static_cast<int64_t>(models::ReversePassElementsPerLayer(in.config, in.length)) * in.element_bytes;
  plan.kept_bytes = !plan.checkpoint ? row_bytes
                    : in.model_pass  ? std::min(row_bytes, model_pass_checkpointed)
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
  return plan;
}

}  // namespace posbias::jacobian
