// The engine's batch plan as numbers: how many cotangent rows go through one reverse pass, when
// activation checkpointing turns on, and the CPU caps, for autograd and the model's own pass.
#include "server/jacobian/batch_plan.h"

#include <gtest/gtest.h>

namespace posbias::jacobian {
namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

BatchPlanInputs Gpt2Small(int64_t length, int64_t rows, int64_t budget) {
  BatchPlanInputs in;
  in.config.num_layers = 12;
  in.config.hidden_size = 768;
  in.config.num_heads = 12;
  in.config.intermediate_size = 3072;
  in.length = length;
  in.rows_total = rows;
  in.budget_bytes = budget;
  return in;
}

TEST(BatchPlan, ActivationsPerRowFollowTheSharedFormula) {
  const auto in = Gpt2Small(128, 768, 0);
  const double per_layer = 128.0 * (12 * 768 + 3 * 3072) + 2.0 * 12 * 128 * 128;
  EXPECT_EQ(ActivationBytesPerRow(in.config, 128, 4), static_cast<int64_t>(13 * per_layer * 4));
  EXPECT_DOUBLE_EQ(models::ActivationElementsPerLayer(in.config, 128), per_layer);
}

TEST(BatchPlan, AutogradOnTheCpuTakesAtMostSixteenRowsInEqualChunks) {
  const auto plan = PlanBatches(Gpt2Small(128, 64, 64 * 1024 * kMiB));
  EXPECT_FALSE(plan.checkpoint);
  EXPECT_EQ(plan.batch, 16);
  EXPECT_EQ(plan.rows_per_call, 16);
  auto odd = Gpt2Small(128, 36, 64 * 1024 * kMiB);  // 36 rows: 3 chunks of 12, not 16 + 16 + 4.
  EXPECT_EQ(PlanBatches(odd).batch, 12);
}

TEST(BatchPlan, OnCudaTheBudgetAloneSizesTheBatch) {
  auto in = Gpt2Small(128, 768, 0);
  in.on_cuda = true;
  in.budget_bytes = 10 * ActivationBytesPerRow(in.config, 128, 4);
  const auto plan = PlanBatches(in);
  EXPECT_EQ(plan.batch, 10);  // 768 rows, at most 10 a pass: 77 chunks of ceil(768 / 77) = 10.
}

TEST(BatchPlan, CheckpointingTurnsOnWhenOneRowExceedsTheBudget) {
  auto in = Gpt2Small(2048, 768, 0);
  in.budget_bytes = ActivationBytesPerRow(in.config, 2048, 4) - 1;
  const auto plan = PlanBatches(in);
  EXPECT_TRUE(plan.checkpoint);
  EXPECT_EQ(plan.kept_bytes, ActivationBytesPerRow(in.config, 2048, 4) / 12);
  in.checkpointing = Checkpointing::kOff;
  EXPECT_FALSE(PlanBatches(in).checkpoint) << "off means off";
  in.budget_bytes = int64_t{1} << 50;
  in.checkpointing = Checkpointing::kOn;
  EXPECT_TRUE(PlanBatches(in).checkpoint) << "on means on";
}

TEST(BatchPlan, TheModelPassOnTheCpuKeepsAboutFourThousandProductRows) {
  auto in = Gpt2Small(128, 64, 64 * 1024 * kMiB);
  in.model_pass = true;
  const auto plan = PlanBatches(in);
  EXPECT_EQ(plan.batch, 32);  // 4096 / 128.
  EXPECT_GE(plan.rows_per_call, plan.batch);
  EXPECT_LE(plan.rows_per_call, 64);
}

TEST(BatchPlan, TheModelPassAtLongContextsSharesEachBlockWithEightRowsAndKeepsMemoryLinearInL) {
  for (int64_t length : {8192, 32768}) {
    auto in = Gpt2Small(length, 64, 64 * 1024 * kMiB);
    in.model_pass = true;
    const auto plan = PlanBatches(in);
    EXPECT_EQ(plan.batch, kCpuModelPassMinRows) << length;
    EXPECT_FALSE(plan.checkpoint) << "the blocked pass keeps O(L): no checkpointing at L = " << length;
  }
  // Linear in L: four times the length, four times the bytes.
  const auto config = Gpt2Small(1, 64, 1).config;
  EXPECT_EQ(ModelPassBytes(config, 4 * 8192, 4), 4 * ModelPassBytes(config, 8192, 4));
  EXPECT_EQ(ReverseBytesPerRow(config, 4 * 8192, 4), 4 * ReverseBytesPerRow(config, 8192, 4));
}

TEST(BatchPlan, ARequestedBatchIsKeptAsGiven) {
  auto in = Gpt2Small(128, 64, 64 * 1024 * kMiB);
  in.requested_batch = 5;
  in.model_pass = true;
  const auto plan = PlanBatches(in);
  EXPECT_EQ(plan.batch, 5);
  EXPECT_EQ(plan.rows_per_call, 5);
}

TEST(BatchPlan, AnyBudgetGivesAtLeastOneRow) {
  for (bool model_pass : {false, true}) {
    auto in = Gpt2Small(4096, 768, 1);
    in.model_pass = model_pass;
    const auto plan = PlanBatches(in);
    EXPECT_GE(plan.batch, 1);
    EXPECT_GE(plan.rows_per_call, 1);
  }
}

TEST(BatchPlan, OnTheCpuTheAttentionBlocksAreCacheSized) {
  auto in = Gpt2Small(8192, 64, 64 * 1024 * kMiB);
  in.model_pass = true;
  const auto plan = PlanBatches(in);
  EXPECT_EQ(plan.blocks.forward, models::kDefaultAttentionBlock);
  // 12 heads x 8 rows x block^2 near 4 Mi elements: sqrt(4 Mi / 96) = 209, down to a multiple of 16.
  EXPECT_EQ(plan.blocks.reverse, 208);
  EXPECT_EQ(plan.blocks.reverse, models::CpuReverseAttentionBlock(12, plan.batch, 8192));
  // Never longer than the sequence.
  auto short_in = Gpt2Small(100, 64, 64 * 1024 * kMiB);
  short_in.model_pass = true;
  const auto short_plan = PlanBatches(short_in);
  EXPECT_EQ(short_plan.blocks.forward, 100);
  EXPECT_LE(short_plan.blocks.reverse, 100);
}

TEST(BatchPlan, OnCudaTheAttentionBlocksGrowWithTheMemoryLeftAndShrinkToTheCpusWhenItIsTight) {
  auto in = Gpt2Small(32768, 64, 80 * 1024 * kMiB);
  in.model_pass = true;
  in.on_cuda = true;
  const auto roomy = PlanBatches(in);
  EXPECT_EQ(roomy.blocks.forward, models::kMaxCudaAttentionBlock);
  EXPECT_GT(roomy.blocks.reverse, models::kDefaultAttentionBlock);
  EXPECT_EQ(roomy.blocks.reverse % 64, 0);
  // The blocks' scratch fits what the activations and the rows leave of the budget.
  const double left = static_cast<double>(in.budget_bytes - roomy.kept_bytes -
                                          roomy.batch * ReverseBytesPerRow(in.config, in.length, 4));
  EXPECT_LE(models::ReverseBlockScratchBytes(12, roomy.batch, roomy.blocks.reverse, 4), left);
  EXPECT_LE(models::ForwardBlockScratchBytes(12, roomy.blocks.forward, 4), left);
  // A budget that leaves nothing: the CPU's cache-sized blocks, never smaller.
  in.budget_bytes = roomy.kept_bytes + roomy.batch * ReverseBytesPerRow(in.config, in.length, 4);
  in.requested_batch = roomy.batch;
  in.checkpointing = roomy.checkpoint ? Checkpointing::kOn : Checkpointing::kOff;
  const auto tight = PlanBatches(in);
  EXPECT_EQ(tight.blocks.forward, models::kDefaultAttentionBlock);
  EXPECT_EQ(tight.blocks.reverse, models::CpuReverseAttentionBlock(12, roomy.batch, 32768));
}

TEST(BatchPlan, ThePredictedPeakCountsTheBlocksThePlanChose) {
  auto in = Gpt2Small(32768, 8, 80 * 1024 * kMiB);
  in.model_pass = true;
  in.on_cuda = true;
  auto plan = PlanBatches(in);
  const int64_t big = PredictMemory(in, plan, 0).transient;
  plan.blocks.reverse = models::kDefaultAttentionBlock;
  plan.blocks.forward = models::kDefaultAttentionBlock;
  EXPECT_LE(PredictMemory(in, plan, 0).transient, big) << "smaller blocks never predict more";
  plan.blocks.reverse = 4 * models::kMaxCudaAttentionBlock;
  EXPECT_GT(PredictMemory(in, plan, 0).transient, big) << "the block scratch is part of the peak";
}

TEST(MlpJacobians, PayForExactNormsOfGpt2SmallButNotForEightProbes) {
  EXPECT_TRUE(models::MlpJacobiansPay(768, 768, 3072, false));
  EXPECT_FALSE(models::MlpJacobiansPay(8, 768, 3072, false));
  // SwiGLU's three row products make the Jacobians pay sooner.
  EXPECT_TRUE(models::MlpJacobiansPay(600, 896, 4864, true));
  EXPECT_FALSE(models::MlpJacobiansPay(600, 896, 4864, false));
}

}  // namespace
}  // namespace posbias::jacobian
