// The FLOP counter (server/jacobian/flop_count.h) against counts worked by hand on tiny shapes:
// every product of the forward and the reverse pass written out, 2 FLOPs per multiply-add.
#include "server/jacobian/flop_count.h"

#include <gtest/gtest.h>

namespace posbias::jacobian {
namespace {

// A GPT-2-shaped decoder: width 4, 2 heads of 2, MLP 8 (GELU: two products), vocabulary 10.
BatchPlanInputs TinyGpt2(int64_t layers, int64_t length, int64_t rows) {
  BatchPlanInputs in;
  in.config.family = models::Family::kGpt2;
  in.config.num_layers = layers;
  in.config.hidden_size = 4;
  in.config.num_heads = 2;
  in.config.num_kv_heads = 2;
  in.config.intermediate_size = 8;
  in.config.vocab_size = 10;
  in.length = length;
  in.rows_total = rows;
  in.model_pass = true;
  return in;
}

BatchPlan Blocks(int64_t forward, int64_t reverse, int64_t rows_per_call, int64_t batch) {
  BatchPlan plan;
  plan.blocks.forward = forward;
  plan.blocks.reverse = reverse;
  plan.rows_per_call = rows_per_call;
  plan.batch = batch;
  return plan;
}

// Forward of one TinyGpt2 layer at L = 4 in blocks of 2: q, k, v (2 L d 3d), o (2 L d d), the MLP
// (2 L d m, twice), and the attention's block pairs: rows 0-1 see keys 0-1 (2 x 2), rows 2-3 see
// keys 0-3 (2 x 4): area 12, scores and P V 2 x 2 hd per head.
constexpr double kLayerForward = 2 * 4 * 4 * 12 + 2 * 4 * 4 * 4 + 2 * (2 * 4 * 4 * 8) + 2 * (2 * 2 * 2 * 12);

TEST(FlopCount, BlockAreasFollowTheCausalAndWindowedSkipping) {
  EXPECT_DOUBLE_EQ(VisitedBlockArea(0, 8, 2, 0), 2 * 2 + 2 * 4 + 2 * 6 + 2 * 8);
  // Window 3: rows 4-5 reach back to key 2, rows 6-7 to key 4; key blocks start on the grid.
  EXPECT_DOUBLE_EQ(VisitedBlockArea(0, 8, 2, 3), 2 * 2 + 2 * 4 + 2 * 4 + 2 * 4);
  // From row 7 only (the layer where the cotangents enter): one row against every key.
  EXPECT_DOUBLE_EQ(VisitedBlockArea(7, 8, 2, 0), 1 * 8);
  // A block larger than L is L.
  EXPECT_DOUBLE_EQ(VisitedBlockArea(0, 3, 256, 0), 3 * 3);
}

TEST(FlopCount, OneLayerWithThreeProbeRowsEnteringAtTheTarget) {
  const auto in = TinyGpt2(1, 4, 3);
  const auto flops = PredictFlops(in, Blocks(2, 2, 3, 3), {});
  EXPECT_DOUBLE_EQ(flops.forward, kLayerForward);
  // The target row (R = 1) against keys 0-3 (area 4), K = 3 rows: o's transpose (2 K R d d),
  // dV dP dQ dK (4 x 2 hd K area per head), v's and k's transposes on all 4 positions, q's on the
  // row, the MLP as row products (its Jacobians do not pay for 3 rows of width 4).
  const double reverse = 2 * 3 * 1 * 4 * 4 + 4 * (2 * 2 * 3 * 4) * 2 + 2 * (2 * 3 * 4 * 4 * 4) + 2 * 3 * 1 * 4 * 4 +
                         2 * (2 * 3 * 1 * 4 * 8);
  EXPECT_DOUBLE_EQ(flops.reverse, reverse);
  // The block's scores once for the one product of 3 rows: 2 hd area per head.
  EXPECT_DOUBLE_EQ(flops.recompute, 2 * 2 * 4 * 2);
}

TEST(FlopCount, LayersBelowTheTopCarryTheRowsAtEveryPosition) {
  const auto one = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 3, 3), {});
  const auto two = PredictFlops(TinyGpt2(2, 4, 3), Blocks(2, 2, 3, 3), {});
  EXPECT_DOUBLE_EQ(two.forward, 2 * kLayerForward);
  // The lower layer: R = 4 rows, attention area 12 (as the forward's blocks of 2).
  const double lower = 2 * 3 * 4 * 4 * 4 + 4 * (2 * 2 * 3 * 12) * 2 + 2 * (2 * 3 * 4 * 4 * 4) + 2 * 3 * 4 * 4 * 4 +
                       2 * (2 * 3 * 4 * 4 * 8);
  EXPECT_DOUBLE_EQ(two.reverse - one.reverse, lower);
  EXPECT_DOUBLE_EQ(two.recompute - one.recompute, 2 * 2 * 12 * 2);
}

TEST(FlopCount, RowsSplitIntoCallsAndProductsRecomputeScoresPerProduct) {
  // (Three rows or fewer: the MLP's Jacobians never pay at width 4, so both go through row products.)
  const auto whole = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 3, 3), {});
  const auto split = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 1, 1), {});
  EXPECT_DOUBLE_EQ(split.forward, whole.forward);
  EXPECT_DOUBLE_EQ(split.reverse, whole.reverse);  // Row products are linear in the rows.
  EXPECT_DOUBLE_EQ(split.recompute, 3 * whole.recompute);  // One product per row: three times the scores.
}

TEST(FlopCount, CheckpointingRecomputesEveryLayerOncePerCall) {
  auto plan = Blocks(2, 2, 2, 2);
  const auto kept = PredictFlops(TinyGpt2(2, 4, 4), plan, {});
  plan.checkpoint = true;
  const auto recomputed = PredictFlops(TinyGpt2(2, 4, 4), plan, {});
  EXPECT_DOUBLE_EQ(recomputed.recompute - kept.recompute, 2 /*calls*/ * 2 /*layers*/ * kLayerForward);
  EXPECT_DOUBLE_EQ(recomputed.required(), kept.required());
}

TEST(FlopCount, TheValuePathwayDropsTheScoreProducts) {
  FlopInputs value;
  value.value_only = true;
  const auto full = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 3, 3), {});
  const auto value_only = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 3, 3), value);
  // Gone: dP, dQ, dK (3 x 2 hd K area per head), k's and q's projections' transposes.
  EXPECT_DOUBLE_EQ(full.reverse - value_only.reverse, 3 * (2 * 2 * 3 * 4) * 2 + 2 * 3 * 4 * 4 * 4 + 2 * 3 * 1 * 4 * 4);
  FlopInputs both;
  both.compare_pathways = true;
  const auto compared = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 3, 3), both);
  EXPECT_DOUBLE_EQ(compared.reverse, full.reverse + value_only.reverse);
}

TEST(FlopCount, TheHeadCountsAtTheTargetForTheLogProbabilityAndEverywhereForTheLoss) {
  FlopInputs log_prob;
  log_prob.log_prob = true;
  const auto plain = PredictFlops(TinyGpt2(1, 4, 1), Blocks(2, 2, 1, 1), {});
  const auto scored = PredictFlops(TinyGpt2(1, 4, 1), Blocks(2, 2, 1, 1), log_prob);
  EXPECT_DOUBLE_EQ(scored.forward - plain.forward, 2 * 4 * 10);
  EXPECT_DOUBLE_EQ(scored.reverse - plain.reverse, 2 * 4 * 10);
  auto in = TinyGpt2(1, 4, 1);
  in.loss_over_positions = true;
  const auto loss = PredictFlops(in, Blocks(2, 2, 1, 1), {});
  EXPECT_DOUBLE_EQ(loss.forward - plain.forward, 4 * 2 * 4 * 10);
  // One row entering every position: the top layer works on all 4 rows, as a lower layer does.
  const double layer = 2 * 1 * 4 * 4 * 4 + 4 * (2 * 2 * 1 * 12) * 2 + 2 * (2 * 1 * 4 * 4 * 4) + 2 * 1 * 4 * 4 * 4 +
                       2 * (2 * 1 * 4 * 4 * 8);
  EXPECT_DOUBLE_EQ(loss.reverse, layer + 4 * 2 * 4 * 10);
}

TEST(FlopCount, ExactRowsThroughTheMlpsJacobiansCostTheirFormingOnceAndDSquaredPerRow) {
  // GPT-2 small, L = 128, exact (768 rows in one call): the per-position Jacobians pay.
  BatchPlanInputs in = TinyGpt2(1, 128, 768);
  in.config.hidden_size = 768, in.config.num_heads = 12, in.config.num_kv_heads = 12, in.config.intermediate_size = 3072;
  const auto flops = PredictFlops(in, Blocks(128, 16, 768, 32), {});
  const double d = 768, m = 3072, k = 768;
  const double attention = 4 * (2 * 64 * k * 128) * 12;  // The target row against 128 keys, 12 heads.
  const double projections = 2 * k * d * d + 2 * (2 * k * 128 * d * d) + 2 * k * d * d;  // o, v and k, q.
  const double mlp = 2 * d * m * d + 2 * k * d * d;  // Form C_t [d, d] for the target row, apply to 768 rows.
  EXPECT_DOUBLE_EQ(flops.reverse, attention + projections + mlp);
}

TEST(FlopCount, SweepingLayersEntersAtEachLayerInTurn) {
  FlopInputs sweep;
  sweep.layer_sweep = true;
  const auto one = PredictFlops(TinyGpt2(1, 4, 3), Blocks(2, 2, 3, 3), {});
  const auto two = PredictFlops(TinyGpt2(2, 4, 3), Blocks(2, 2, 3, 3), {});
  const auto swept = PredictFlops(TinyGpt2(2, 4, 3), Blocks(2, 2, 3, 3), sweep);
  // Output 1 enters layer 1 at its target row (as the one-layer model); output 2 is the plain pass.
  EXPECT_DOUBLE_EQ(swept.reverse, one.reverse + two.reverse);
  EXPECT_DOUBLE_EQ(swept.forward, two.forward);
}

}  // namespace
}  // namespace posbias::jacobian
