// The floating-point work of one measured sample through the model's own reverse pass, counted from
// the plan (PlanBatches) the way reverse_pass.cc runs it: the matrix products only (2 FLOPs per
// multiply-add), so that FLOPs / the machine's peak matrix-product rate is a true lower bound on
// the time (bench/run_real_shapes.sh: the floor, and efficiency = floor / measured time).
//
// Counted, per layer of the decoder:
//  - the forward pass (once per sample, positions 1..t): the projections (q, k, v, o), the MLP's
//    two or three products, and for every query x key block pair the attention visits
//    (models::PlanAttentionBlocks' forward block, causal and windowed skipping as in the pass)
//    the scores and P V;
//  - the reverse pass of the K cotangent rows, layer by layer: the output projection's transpose
//    on the rows the cotangents reach (the target row in the layer where they enter, all t rows
//    below), per visited block pair dV = P^T dO, and with the score pathway dP = dO V^T,
//    dQ = dS K, dK = dS^T Q; the projections' transposes (v and k on all t positions, q on the
//    reached rows); the MLP as K row products, or through its per-position Jacobians where the
//    pass forms them (models::MlpJacobiansPay: d^2 m per position, then K d^2);
//  - recomputation, apart: each reverse block's scores once per product of rows (shared by the
//    product's rows), and a checkpointed layer's forward once per call;
//  - the output head: the log-probability's logits and their transpose at the target, the loss
//    gradient's at every position.
// Norms, softmax exponentials, rotary and elementwise work are not counted (they are memory-bound).
// Torch-free: a pure function of the shape and the plan, tested against hand counts.
#pragma once

#include <cstdint>

#include "server/jacobian/batch_plan.h"

namespace posbias::jacobian {

// What the measurement computes beyond the plan's inputs (BatchPlanInputs).
struct FlopInputs {
  int64_t target = 0;            // t: the pass runs positions 1..t; 0 = the plan's length.
  bool layer_sweep = false;      // One output per layer: the rows enter at each layer's output in turn.
  bool log_prob = false;         // The next-token log-probability: the head at the target, both ways.
  bool value_only = false;       // Attention probabilities held fixed: dV only, no score pathway.
  bool compare_pathways = false; // Every call again through the value pathway alone.
};

// FLOPs of one sample, by part.
struct FlopCount {
  double forward = 0;    // The forward pass (and the head's logits).
  double reverse = 0;    // The cotangent rows' products (and the head's transpose).
  double recompute = 0;  // Done again for the reverse: block scores per product, checkpointed layers.
  // The work the pass must do: forward and reverse (recomputation is the pass's own choice).
  double required() const { return forward + reverse; }
  double total() const { return forward + reverse + recompute; }
};

// The FLOPs of one sample of a measurement through the model's own pass (inputs.model_pass), from
// the same inputs and plan as PredictMemory.
FlopCount PredictFlops(const BatchPlanInputs& inputs, const BatchPlan& plan, const FlopInputs& what);

// The visited query x key block pairs' area (sum over visited pairs of rows x keys) of a blocked
// causal attention over query rows [first, length) and keys up to each row, in blocks of `block`,
// a window > 0 skipping key blocks wholly before it (reverse_pass.cc's KeysOf).
double VisitedBlockArea(int64_t first, int64_t length, int64_t block, int64_t window);

}  // namespace posbias::jacobian
