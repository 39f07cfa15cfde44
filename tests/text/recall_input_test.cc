// Token-id recall probes of jobs (text/recall_input.h): a model trained on a recall task is asked
// that task by default and the sweep says so; a request's own ranges win; text can still be
// asked; refusals name the field.
#include "server/text/recall_input.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace posbias::text {
namespace {

registry::ModelEntry TrainedModel() {
  registry::ModelEntry model;
  model.name = "recall-step3000";
  model.config.vocab_size = 257;
  recall::MqarOptions task;
  task.pairs = 4;
  task.keys = {100, 120};
  task.values = {200, 210};
  task.filler = {32, 90};
  model.trained_recall = task;
  return model;
}

jobs::JacobianJobSpec SpecOfLength(int64_t length) {
  jobs::JacobianJobSpec spec;
  spec.length = length;
  return spec;
}

v1::RecallInput TwoDepths() {
  v1::RecallInput input;
  input.add_depths(0.0);
  input.add_depths(1.0);
  input.set_probes_per_depth(3);
  input.set_seed(5);
  return input;
}

TEST(TokenIdRecall, AModelTrainedOnRecallIsAskedItsTaskAndTheSweepSaysSo) {
  const registry::ModelEntry model = TrainedModel();
  const v1::RecallInput input = TwoDepths();
  ASSERT_TRUE(AsksTokenIds(input, model));
  auto laid_out = LayOutTokenIdRecall(input, model, SpecOfLength(64));
  ASSERT_TRUE(laid_out.ok()) << laid_out.status();
  ASSERT_TRUE(laid_out->recall.has_value());
  const auto& sweep = *laid_out->recall;
  EXPECT_TRUE(sweep.token_ids);
  EXPECT_EQ(sweep.pairs, 4);
  EXPECT_EQ(sweep.value_ids, (std::vector<int64_t>{200, 210}));
  EXPECT_DOUBLE_EQ(sweep.Chance(), 0.1);
  EXPECT_EQ(sweep.Description(),
            "token ids: 4 pairs, keys 100:120, values 200:210, filler 32:90 (the task recall-step3000 was trained on)");
  ASSERT_EQ(laid_out->tokens.size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    const auto& ids = laid_out->tokens[i];
    ASSERT_EQ(ids.size(), 65u);
    const int64_t key_at = sweep.pair_starts[i];  // 1-based.
    EXPECT_EQ(key_at, i < 3 ? 1 : 62) << "depth 0: the first position; depth 1: 1 + (L - 3)";
    EXPECT_EQ(sweep.pair_tokens[i], 2);
    EXPECT_EQ(ids[63], ids[key_at - 1]) << "position L asks the pair's key";
    EXPECT_EQ(ids[64], ids[key_at]) << "the answer is its value";
    EXPECT_GE(ids[64], 200);
    EXPECT_LT(ids[64], 210);
  }
  auto again = LayOutTokenIdRecall(input, model, SpecOfLength(64));
  EXPECT_EQ(again->tokens, laid_out->tokens) << "the seed names the probes";
}

TEST(TokenIdRecall, TheRequestsRangesWinAndTextCanStillBeAsked) {
  registry::ModelEntry model = TrainedModel();
  v1::RecallInput input = TwoDepths();
  input.mutable_token_ids()->mutable_value_ids()->set_first(220);
  input.mutable_token_ids()->mutable_value_ids()->set_last(256);
  auto laid_out = LayOutTokenIdRecall(input, model, SpecOfLength(64));
  ASSERT_TRUE(laid_out.ok()) << laid_out.status();
  EXPECT_EQ(laid_out->recall->value_ids, (std::vector<int64_t>{220, 256}));
  EXPECT_EQ(laid_out->recall->key_ids, (std::vector<int64_t>{128, 192})) << "an unset range: the default";
  EXPECT_EQ(laid_out->recall->pairs, 8) << "the request's defaults, not the trained task's";
  EXPECT_EQ(laid_out->recall->trained_task_of, "");
  v1::RecallInput text = TwoDepths();
  text.set_text(true);
  EXPECT_FALSE(AsksTokenIds(text, model));
  model.trained_recall.reset();
  EXPECT_FALSE(AsksTokenIds(TwoDepths(), model)) << "an untrained model is asked text by default";
}

TEST(TokenIdRecall, RefusalsNameTheFieldAndWhatIsAllowed) {
  const registry::ModelEntry model = TrainedModel();
  const auto message = [&](const v1::RecallInput& input, int64_t length = 64) {
    return std::string(LayOutTokenIdRecall(input, model, SpecOfLength(length)).status().message());
  };
  v1::RecallInput both = TwoDepths();
  both.mutable_token_ids();
  both.set_text(true);
  EXPECT_THAT(message(both), testing::HasSubstr("spec.jacobian_norm.input.recall.text"));
  v1::RecallInput letters = TwoDepths();
  letters.set_key_letters(3);
  EXPECT_THAT(message(letters), testing::HasSubstr("spec.jacobian_norm.input.recall.key_letters"));
  v1::RecallInput beyond = TwoDepths();
  beyond.mutable_token_ids()->mutable_value_ids()->set_first(250);
  beyond.mutable_token_ids()->mutable_value_ids()->set_last(300);
  EXPECT_THAT(message(beyond), testing::AllOf(testing::HasSubstr("spec.jacobian_norm.input.recall.token_ids.value_ids"),
                                              testing::HasSubstr("250:300"), testing::HasSubstr("257")));
  v1::RecallInput crowded = TwoDepths();
  crowded.set_pairs(4);
  EXPECT_THAT(message(crowded, 14), testing::AllOf(testing::HasSubstr("spec.jacobian_norm.input.recall.pairs"),
                                                   testing::HasSubstr("at most (L - 3) / 3 = 3")));
  v1::RecallInput no_depths = TwoDepths();
  no_depths.clear_depths();
  EXPECT_THAT(message(no_depths), testing::HasSubstr("spec.jacobian_norm.input.recall.depths"));
}

}  // namespace
}  // namespace posbias::text
