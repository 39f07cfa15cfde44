// The batch plan of the own reverse pass for a model shape at long contexts, on paper: what the
// planner (server/jacobian/batch_plan.h) predicts for memory and rows per product on a device of a
// given memory, and the pass's FLOPs (attention blocks and the linear maps), without running it.
//
//   plan_long_context [--device-gib 141] [--element-bytes 2] [--rows 8]      (L = 32768 and 131072)
//
// Prints one JSON object per length.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "server/jacobian/batch_plan.h"
#include "server/models/config.h"

namespace {

using posbias::models::ModelConfig;

// Llama-3-8B (meta-llama/Meta-Llama-3-8B's config.json): 32 layers, d 4096, 32 heads, 8 kv heads,
// head_dim 128, MLP 14336, vocabulary 128256.
ModelConfig Llama3_8B() {
  ModelConfig config;
  config.family = posbias::models::Family::kLlama;
  config.num_layers = 32;
  config.hidden_size = 4096;
  config.num_heads = 32;
  config.num_kv_heads = 8;
  config.intermediate_size = 14336;
  config.vocab_size = 128256;
  config.max_positions = 131072;
  return config;
}

// FLOPs of one sample with K cotangent rows: the forward (linear maps 2 P_layer L, causal
// attention 2 * 2 * heads * hd * L^2 / 2), the reverse per row (linear maps 2 P_layer L, the
// attention's dV, dP, dQ, dK 4 * 2 * heads * hd * L^2 / 2) plus the scores recomputed once per
// row group, for every layer but the top one, which works on the target row.
double Flops(const ModelConfig& c, double length, double rows, double rows_per_product) {
  const double d = c.hidden_size, m = c.intermediate_size, hd = c.head_dim(), h = c.num_heads, kv = c.num_kv_heads;
  const double linear = 2.0 * length * (d * h * hd + 2 * d * kv * hd + h * hd * d + 3 * d * m);
  const double scores = 2.0 * h * hd * length * length / 2;  // Q K^T (or P V), causal half.
  const double layers = c.num_layers;
  const double forward = layers * (linear + 2 * scores);
  const double groups = rows / rows_per_product;
  const double reverse = (layers - 1) * (rows * (linear + 4 * scores) + groups * scores);
  return forward + reverse;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t device_gib = 141, element_bytes = 2, rows = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--device-gib")) device_gib = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--element-bytes")) element_bytes = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--rows")) rows = std::atoll(argv[i + 1]);
  }
  const ModelConfig config = Llama3_8B();
  const double weights = element_bytes * posbias::models::EstimatedParameters(config);
  for (int64_t length : {int64_t{32768}, int64_t{131072}}) {
    posbias::jacobian::BatchPlanInputs in;
    in.config = config;
    in.length = length;
    in.element_bytes = element_bytes;
    in.rows_total = rows;
    in.model_pass = true;
    in.on_cuda = true;
    // The engine's budget: half of what the device has free once the weights are in.
    in.budget_bytes = static_cast<int64_t>((static_cast<double>(device_gib) * (1 << 30) - weights) / 2);
    const auto plan = posbias::jacobian::PlanBatches(in);
    const double kept = static_cast<double>(plan.kept_bytes);
    const double per_row = static_cast<double>(posbias::jacobian::ReverseBytesPerRow(config, length, element_bytes));
    // The engine's own prediction (the one posbias-measure reports and admission uses).
    const auto memory = posbias::jacobian::PredictMemory(
        in, plan, static_cast<int64_t>(posbias::models::EstimatedParameters(config)));
    const double peak = static_cast<double>(memory.total());
    std::printf("{\"model\": \"llama3-8b\", \"length\": %lld, \"element_bytes\": %lld, \"rows\": %lld, "
                "\"weights_gib\": %.1f, \"checkpoint\": %s, \"kept_gib\": %.1f, \"per_row_gib\": %.2f, "
                "\"rows_per_product\": %lld, \"forward_block\": %lld, \"reverse_block\": %lld, "
                "\"predicted_peak_gib\": %.1f, \"tflop\": %.0f}\n",
                static_cast<long long>(length), static_cast<long long>(element_bytes), static_cast<long long>(rows),
                weights / (1 << 30), plan.checkpoint ? "true" : "false", kept / (1 << 30), per_row / (1 << 30),
                static_cast<long long>(plan.batch), static_cast<long long>(plan.blocks.forward),
                static_cast<long long>(plan.blocks.reverse), peak / (1 << 30),
                Flops(config, static_cast<double>(length), static_cast<double>(rows), static_cast<double>(plan.batch)) / 1e12);
  }
  return 0;
}
