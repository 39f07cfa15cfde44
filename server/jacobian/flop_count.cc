#include "server/jacobian/flop_count.h"

#include <algorithm>

#include "server/models/architecture.h"
#include "server/models/schedule.h"

namespace posbias::jacobian {

double VisitedBlockArea(int64_t first, int64_t length, int64_t block, int64_t window) {
  block = std::max<int64_t>(1, std::min(block, length));
  double area = 0;
  for (int64_t i0 = first; i0 < length; i0 += block) {
    const int64_t i1 = std::min(length, i0 + block);
    const int64_t lowest = window > 0 ? std::max<int64_t>(0, i0 - window + 1) : 0;
    const int64_t first_key = lowest / block * block;  // The key blocks sit on the grid of `block`.
    area += static_cast<double>(i1 - i0) * static_cast<double>(i1 - first_key);
  }
  return area;
}

namespace {

// One decoder's shape as the counts need it (doubles: the products overflow 64 bits at 1M positions).
struct Shape {
  double d, m, heads, head_dim, q_width, kv_width, vocab;
  double mlp_products;  // 2 (GELU) or 3 (gated: gate, up, down).
  bool gated, has_mlp, uniform;
};

Shape ShapeOf(const models::ModelConfig& c) {
  Shape s{};
  s.d = static_cast<double>(c.hidden_size);
  s.m = static_cast<double>(c.intermediate_size);
  s.heads = static_cast<double>(c.num_heads);
  s.head_dim = static_cast<double>(c.head_dim());
  s.q_width = s.heads * s.head_dim;
  s.kv_width = static_cast<double>(c.num_kv_heads) * s.head_dim;
  s.vocab = static_cast<double>(c.vocab_size);
  const auto* architecture = models::ArchitectureOf(c.family);
  s.gated = architecture != nullptr && models::IsGated(architecture->mlp);
  s.mlp_products = s.gated ? 3.0 : 2.0;
  s.has_mlp = !c.ablations.no_mlp;
  s.uniform = c.ablations.uniform_attention;
  return s;
}

class Counter {
 public:
  Counter(const BatchPlanInputs& in, const BatchPlan& plan, const FlopInputs& what)
      : config_(in.config), shape_(ShapeOf(in.config)), plan_(plan), what_(what),
        t_(what.target > 0 ? what.target : in.length), rows_total_(in.rows_total), loss_(in.loss_over_positions) {}

  FlopCount Count() {
    const double t = static_cast<double>(t_);
    const int64_t layers = config_.num_layers;
    for (int64_t l = 0; l < layers; ++l) count_.forward += LayerForward(l);
    const double head = 2.0 * shape_.d * shape_.vocab;  // One position's logits (or their transpose).
    if (loss_) {
      count_.forward += head * t;
      count_.reverse += head * t;
    } else if (what_.log_prob) {
      count_.forward += head;
      count_.reverse += head;
    }
    const int64_t outputs = what_.layer_sweep ? layers : 1;
    const int64_t per_call = std::max<int64_t>(1, plan_.rows_per_call);
    for (int64_t o = 0; o < outputs; ++o) {
      const int64_t top = what_.layer_sweep ? o + 1 : layers;
      for (int64_t start = 0; start < rows_total_; start += per_call) {
        const int64_t rows = std::min(per_call, rows_total_ - start);
        Call(top, rows, !what_.value_only);
        if (what_.compare_pathways) Call(top, rows, /*scores=*/false);
      }
    }
    return count_;
  }

 private:
  double AttentionArea(int64_t layer, int64_t first, int64_t block) const {
    return VisitedBlockArea(first, t_, block, config_.WindowOf(layer));
  }
  // The uniform average over the whole prefix is a running mean: no products at all.
  bool RunningMean(int64_t layer) const { return shape_.uniform && config_.WindowOf(layer) == 0; }

  double LayerForward(int64_t layer) const {
    const Shape& s = shape_;
    const double t = static_cast<double>(t_);
    double flops = 2.0 * t * s.d * (s.q_width + 2.0 * s.kv_width) + 2.0 * t * s.q_width * s.d;
    if (s.has_mlp) flops += 2.0 * t * s.d * s.m * s.mlp_products;
    if (!RunningMean(layer)) {
      const double area = AttentionArea(layer, 0, plan_.blocks.forward);
      flops += (s.uniform ? 2.0 : 4.0) * s.heads * s.head_dim * area;  // Scores (none when uniform), P V.
    }
    return flops;
  }

  // One InputGradients call of `rows` rows entering at layer `top`'s output.
  void Call(int64_t top, int64_t rows, bool scores) {
    for (int64_t l = top - 1; l >= 0; --l) {
      if (plan_.checkpoint) count_.recompute += LayerForward(l);
      const int64_t first = (l == top - 1 && !loss_) ? t_ - 1 : 0;
      LayerReverse(l, rows, first, scores && !shape_.uniform);
    }
  }

  void LayerReverse(int64_t layer, int64_t rows, int64_t first, bool scores) {
    const Shape& s = shape_;
    const double k = static_cast<double>(rows), t = static_cast<double>(t_);
    const double reached = static_cast<double>(t_ - first);  // Output rows the cotangents reach.
    double reverse = 2.0 * k * reached * s.q_width * s.d;     // The output projection's transpose.
    if (!RunningMean(layer)) {
      const double area = AttentionArea(layer, first, plan_.blocks.reverse);
      const int64_t product = std::max<int64_t>(1, plan_.batch);
      const double products = static_cast<double>((rows + product - 1) / product);
      if (!s.uniform) count_.recompute += products * 2.0 * s.heads * s.head_dim * area;  // Each product's scores.
      reverse += (scores ? 8.0 : 2.0) * s.heads * s.head_dim * k * area;                // dV (dP, dQ, dK).
    }
    reverse += 2.0 * k * t * s.kv_width * s.d;  // dV's projection, over every position.
    if (scores) reverse += 2.0 * k * t * s.kv_width * s.d + 2.0 * k * reached * s.q_width * s.d;  // dK's, dQ's.
    if (s.has_mlp) {
      if (models::MlpJacobiansPay(rows, config_.hidden_size, config_.intermediate_size, s.gated)) {
        reverse += 2.0 * s.d * s.m * reached * s.d + 2.0 * reached * k * s.d * s.d;  // Form C_i, apply to K rows.
      } else {
        reverse += 2.0 * k * reached * s.d * s.m * s.mlp_products;
      }
    }
    count_.reverse += reverse;
  }

  const models::ModelConfig& config_;
  Shape shape_;
  const BatchPlan& plan_;
  FlopInputs what_;
  int64_t t_, rows_total_;
  bool loss_;
  FlopCount count_;
};

}  // namespace

FlopCount PredictFlops(const BatchPlanInputs& inputs, const BatchPlan& plan, const FlopInputs& what) {
  return Counter(inputs, plan, what).Count();
}

}  // namespace posbias::jacobian
