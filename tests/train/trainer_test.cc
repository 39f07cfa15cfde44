// posbias::train end to end on tiny models: option errors, gradients reaching the parameters,
// the loss falling on a repetitive text, resume equal to an uninterrupted run, and checkpoints
// that reload into a fresh model with identical logits.
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/models/weights.h"
#include "server/train/trainer.h"
#include "tests/train/scratch_dir.h"

namespace posbias::train {
namespace {

namespace fs = std::filesystem;

ScratchDir FreshDir(const std::string& name) { return ScratchDir("trainer", name); }

// A repetitive text: a few sentences in a seeded order.
fs::path WriteCorpus(const fs::path& dir) {
  const std::vector<std::string> sentences{"the cat sat on the mat. ", "a dog ran to the park. ",
                                           "we sing a song. ", "one two three four. "};
  std::string text;
  uint64_t state = 12345;
  for (int i = 0; i < 400; ++i) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    text += sentences[(state >> 33) % sentences.size()];
  }
  const fs::path path = dir / "corpus.txt";
  std::ofstream(path) << text;
  return path;
}

// gpt2-tiny shrunk further: 1 layer, width 32, 2 heads.
TrainOptions TinyOptions(const fs::path& dir) {
  TrainOptions options;
  options.model = *models::PresetConfig("gpt2-tiny");
  options.model.num_layers = 1;
  options.model.hidden_size = 32;
  options.model.num_heads = 2;
  options.model.num_kv_heads = 2;
  options.model.intermediate_size = 64;
  options.data_paths = {WriteCorpus(dir).string()};
  options.out_dir = (dir / "out").string();
  options.length = 32;
  options.batch_size = 4;
  options.steps = 10;
  options.lr = 3e-3;
  options.warmup_steps = 2;
  options.seed = 3;
  options.progress = TrainOptions::Progress::kOff;
  return options;
}

using OptionChanges = std::vector<std::pair<std::function<void(TrainOptions&)>, std::string>>;

// Each change of `good` is refused by ValidateOptions with INVALID_ARGUMENT naming its flag.
void ExpectEachRefusedNamingItsFlag(const TrainOptions& good, const OptionChanges& cases) {
  for (const auto& [change, flag] : cases) {
    TrainOptions options = good;
    change(options);
    const auto status = ValidateOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << flag;
    EXPECT_NE(status.message().find(flag), std::string::npos) << status;
  }
}

TEST(TrainOptions, BadValuesNameTheirFlag) {
  const auto dir = FreshDir("options");
  const TrainOptions good = TinyOptions(dir);
  EXPECT_TRUE(ValidateOptions(good).ok()) << ValidateOptions(good);
  const OptionChanges cases{
      {[](TrainOptions& o) { o.steps = 0; }, "--steps"},
      {[](TrainOptions& o) { o.lr = 0; }, "--lr"},
      {[](TrainOptions& o) { o.length = 1; }, "--length"},
      {[](TrainOptions& o) { o.length = 4096; }, "--length"},
      {[](TrainOptions& o) { o.batch_size = 0; }, "--batch-size"},
      {[](TrainOptions& o) { o.save_steps = {0, 11}; }, "--save-steps"},
      {[](TrainOptions& o) { o.warmup_steps = 11; }, "--warmup-steps"},
      {[](TrainOptions& o) { o.device = "tpu:0"; }, "--device"},
      {[](TrainOptions& o) { o.dtype = "int8"; }, "--dtype"},
      {[](TrainOptions& o) { o.eval_fraction = 0.9; }, "--eval-fraction"},
      {[](TrainOptions& o) { o.beta2 = 1.0; }, "--betas"},
      {[](TrainOptions& o) { o.clip = -1; }, "--clip"},
      {[](TrainOptions& o) { o.data_paths.clear(); }, "--data"},
      {[](TrainOptions& o) { o.out_dir.clear(); }, "--out"},
      {[](TrainOptions& o) { o.stop_after_step = 12; }, "--stop-after"},
      {[](TrainOptions& o) { o.model = *models::PresetConfig("cesaro"); }, "--arch"},
      {[](TrainOptions& o) { o.position_weights.explicit_weights = {1, 2, 3}; }, "--position-weights"},
  };
  ExpectEachRefusedNamingItsFlag(good, cases);
}

TEST(TrainOptions, DataAndTokenizerErrorsComeBeforeAnyWork) {
  const auto dir = FreshDir("data_errors");
  TrainOptions options = TinyOptions(dir);
  options.batch_size = 10000;
  auto small = Train(options);
  EXPECT_EQ(small.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(small.status().message().find("--batch-size 10000 needs 10000"), std::string::npos) << small.status();
  EXPECT_FALSE(fs::exists(options.out_dir));
  options = TinyOptions(dir);
  options.tokenizer_dir = dir.string();  // Holds no tokenizer file.
  auto missing = Train(options);
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("--tokenizer"), std::string::npos) << missing.status();
  options = TinyOptions(dir);
  options.vocab_given = true;
  options.model.vocab_size = 200;
  auto vocab = Train(options);
  EXPECT_NE(vocab.status().message().find("--vocab"), std::string::npos) << vocab.status();
  EXPECT_NE(vocab.status().message().find("257"), std::string::npos) << vocab.status();
  options = TinyOptions(dir);
  options.eos_token = "ab";
  EXPECT_NE(Train(options).status().message().find("--eos-token"), std::string::npos);
  fs::create_directories(dir / "empty");
  options = TinyOptions(dir);
  options.data_paths = {(dir / "empty").string()};
  EXPECT_NE(Train(options).status().message().find("--data"), std::string::npos);
  EXPECT_FALSE(fs::exists(options.out_dir));
}

TEST(Trainer, GradientsReachEveryParameter) {
  auto config = *models::PresetConfig("llama-tiny");
  auto model = models::BuildModel(config, 1);
  ASSERT_TRUE(model.ok());
  auto ids = torch::randint(config.vocab_size, {2, 8}, torch::kLong);
  auto logits = (*model)->Logits((*model)->Forward((*model)->Embed(ids), models::ForwardOptions{}).hidden);
  logits.pow(2).mean().backward();
  for (const auto& [name, tensor] : (*model)->NamedParameters()) {
    EXPECT_TRUE(tensor.requires_grad()) << name;
    ASSERT_TRUE(tensor.grad().defined()) << name;
    EXPECT_GT(tensor.grad().abs().sum().item<double>(), 0.0) << name;
  }
}

TEST(Trainer, LossFallsOnARepetitiveText) {
  const auto dir = FreshDir("loss_falls");
  TrainOptions options = TinyOptions(dir);
  options.steps = 200;
  options.lr = 1e-2;
  options.save_steps = {0};
  auto result = Train(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->steps.size(), 200u);
  ASSERT_EQ(result->evals.size(), 2u);
  EXPECT_EQ(result->config.vocab_size, 257);
  EXPECT_NEAR(result->evals.front().loss, std::log(257.0), 0.3);  // Near-uniform at initialization.
  EXPECT_LT(result->evals.back().loss, result->unigram_entropy_nats - 1.0);  // It learned the words.
  EXPECT_LT(result->steps.back().loss, result->steps.front().loss - 2.0);
  // The loss by position decile averages to the overall loss, weighted by the deciles' positions.
  for (const auto& eval : result->evals) {
    ASSERT_EQ(eval.by_decile.size(), 10u);
    double weighted = 0;
    for (int64_t t = 1; t <= options.length; ++t) weighted += eval.by_decile[10 * (t - 1) / options.length];
    EXPECT_NEAR(weighted / static_cast<double>(options.length), eval.loss, 1e-9);
  }
  EXPECT_EQ(result->steps.back().tokens, 200 * 4 * 32);
  for (const char* file : {"config.json", "model.safetensors", "tokenizer.json", "trainer_state.pt", "trainer_state.json"}) {
    EXPECT_TRUE(fs::is_regular_file(fs::path(options.out_dir) / "step0" / file)) << file;
    EXPECT_TRUE(fs::is_regular_file(fs::path(options.out_dir) / "step200" / file)) << file;
  }
  EXPECT_TRUE(fs::is_regular_file(fs::path(options.out_dir) / "loss.json"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(options.out_dir) / "tokenizer" / "tokenizer.json"));
}

TEST(Trainer, ResumeEqualsAnUninterruptedRun) {
  const auto dir = FreshDir("resume");
  TrainOptions straight = TinyOptions(dir);
  straight.position_weights.middle_oversampling = 2;  // The weighted objective resumes too.
  auto whole = Train(straight);
  ASSERT_TRUE(whole.ok()) << whole.status();
  TrainOptions interrupted = straight;
  interrupted.out_dir = (dir / "interrupted").string();
  interrupted.stop_after_step = 5;
  auto first = Train(interrupted);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->last_step, 5);
  interrupted.stop_after_step = 0;
  interrupted.resume = true;
  auto second = Train(interrupted);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->first_step, 5);
  ASSERT_EQ(second->steps.size(), whole->steps.size());
  for (size_t i = 0; i < whole->steps.size(); ++i) {
    EXPECT_EQ(second->steps[i].step, whole->steps[i].step);
    EXPECT_NEAR(second->steps[i].loss, whole->steps[i].loss, 1e-6) << i;
    EXPECT_NEAR(second->steps[i].objective, whole->steps[i].objective, 1e-6) << i;
    EXPECT_NEAR(second->steps[i].grad_norm, whole->steps[i].grad_norm, 1e-6) << i;
    EXPECT_DOUBLE_EQ(second->steps[i].lr, whole->steps[i].lr) << i;
  }
  ASSERT_EQ(second->evals.size(), 2u);
  EXPECT_NEAR(second->evals.back().loss, whole->evals.back().loss, 1e-6);
  auto a = whole->model->NamedParameters(), b = second->model->NamedParameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::allclose(a[i].second, b[i].second, 0, 1e-6)) << a[i].first;
  // A different run's options are refused.
  interrupted.seed = 4;
  EXPECT_NE(Train(interrupted).status().message().find("--seed"), std::string::npos);
}

// --task recall on a small MQAR: 2 pairs in 32 tokens, 16 keys and 16 values (chance 1/16), a
// 2-layer Llama of width 32.
TrainOptions TinyRecallOptions(const fs::path& dir) {
  TrainOptions options;
  options.task = Task::kRecall;
  models::ConfigOverrides shape;
  shape.num_layers = 2;
  shape.hidden_size = 32;
  shape.num_heads = 2;
  shape.rope_theta = 10000;
  options.model = models::ApplyShapeOverrides(*models::FamilyConfig("llama"), shape);
  options.out_dir = (dir / "out").string();
  options.length = 32;
  options.mqar.pairs = 2;
  options.mqar.keys = {128, 144};
  options.mqar.values = {192, 208};
  options.batch_size = 32;
  options.steps = 400;
  options.lr = 3e-3;
  options.warmup_steps = 20;
  options.probes_per_depth = 16;
  options.seed = 1;
  options.threads = 1;
  options.progress = TrainOptions::Progress::kOff;
  return options;
}

TEST(TrainOptions, TheRecallTaskRefusesACorpusAMixAndIdsTheVocabularyLacks) {
  const auto dir = FreshDir("recall_options");
  const TrainOptions good = TinyRecallOptions(dir);
  EXPECT_TRUE(ValidateOptions(good).ok()) << ValidateOptions(good);
  const OptionChanges cases{
      {[](TrainOptions& o) { o.data_paths = {"corpus.txt"}; }, "--data"},
      {[](TrainOptions& o) { o.recall_fraction = 0.5; }, "--recall-fraction"},
      {[](TrainOptions& o) { o.recall_rest_weight = 2; }, "--recall-rest-weight"},
      {[](TrainOptions& o) { o.probes_per_depth = 0; }, "--probes-per-depth"},
  };
  ExpectEachRefusedNamingItsFlag(good, cases);
  TrainOptions beyond = good;
  beyond.mqar.values = {240, 300};  // The byte-level vocabulary has 257 ids.
  const auto refused = Train(beyond);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(refused.status().message()),
              testing::AllOf(testing::HasSubstr("--value-ids"), testing::HasSubstr("240:300"), testing::HasSubstr("257")));
  EXPECT_FALSE(fs::exists(fs::path(beyond.out_dir) / "step0"));
}

TEST(Trainer, TheRecallTaskIsLearnedFarAboveChanceWithinAStepBudget) {
  const auto dir = FreshDir("recall_learns");
  TrainOptions options = TinyRecallOptions(dir);
  options.save_steps = {0};
  auto result = Train(options);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_EQ(result->evals.size(), 2u);
  const double chance = 1.0 / 16;
  EXPECT_LT(result->evals.front().accuracy, 3 * chance) << "at initialization";
  EXPECT_GT(result->evals.back().accuracy, 5 * chance) << "after 400 updates";
  EXPECT_LT(result->evals.back().loss, std::log(16.0) - 0.5) << "the answers' loss left chance";
  ASSERT_EQ(result->evals.back().recall.size(), 11u);
  double mean = 0;
  for (const auto& depth : result->evals.back().recall) {
    EXPECT_EQ(depth.probes, 16);
    mean += depth.accuracy / 11;
  }
  EXPECT_NEAR(mean, result->evals.back().accuracy, 1e-12) << "the overall accuracy is the depths' mean";
  EXPECT_GE(result->steps.back().accuracy, 0.0);
  // Every checkpoint says what it was trained on.
  std::ifstream task_file(fs::path(options.out_dir) / "step400" / std::string(kTaskFileName));
  const std::string task((std::istreambuf_iterator<char>(task_file)), std::istreambuf_iterator<char>());
  EXPECT_THAT(task, testing::HasSubstr("\"task\": \"recall\""));
  EXPECT_THAT(task, testing::HasSubstr("\"pairs\": 2"));
  EXPECT_TRUE(fs::is_regular_file(fs::path(options.out_dir) / "step0" / std::string(kTaskFileName)));
}

TEST(Trainer, ARecallRunResumesAsItWouldHaveRun) {
  const auto dir = FreshDir("recall_resume");
  TrainOptions straight = TinyRecallOptions(dir);
  straight.steps = 8;
  straight.warmup_steps = 2;
  straight.recall_rest_weight = 0.1;
  auto whole = Train(straight);
  ASSERT_TRUE(whole.ok()) << whole.status();
  TrainOptions interrupted = straight;
  interrupted.out_dir = (dir / "interrupted").string();
  interrupted.stop_after_step = 3;
  ASSERT_TRUE(Train(interrupted).ok());
  interrupted.stop_after_step = 0;
  interrupted.resume = true;
  auto second = Train(interrupted);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->steps.size(), whole->steps.size());
  for (size_t i = 0; i < whole->steps.size(); ++i) {
    EXPECT_NEAR(second->steps[i].loss, whole->steps[i].loss, 1e-6) << i;
    EXPECT_NEAR(second->steps[i].objective, whole->steps[i].objective, 1e-6) << i;
    EXPECT_DOUBLE_EQ(second->steps[i].accuracy, whole->steps[i].accuracy) << i;
  }
  ASSERT_EQ(second->evals.size(), 2u) << "step 3's, read back from loss.json, and step 8's";
  EXPECT_EQ(second->evals.front().step, 3);
  EXPECT_EQ(second->evals.front().recall.size(), 11u);
  EXPECT_GE(second->evals.front().accuracy, 0.0);
  EXPECT_DOUBLE_EQ(second->evals.back().accuracy, whole->evals.back().accuracy);
  EXPECT_NEAR(second->evals.back().loss, whole->evals.back().loss, 1e-6);
}

// A resumed run reads its own files back; one edited by hand (or cut short) is refused with
// DATA_LOSS naming the file and the field, never read into a number it cannot hold.
TEST(Trainer, ResumingFromAStateWhoseCountIsNotAWholeNumberIsDataLossNamingTheField) {
  const auto dir = FreshDir("bad_state");
  TrainOptions options = TinyOptions(dir);
  options.steps = 4;
  options.stop_after_step = 2;
  ASSERT_TRUE(Train(options).ok());
  options.stop_after_step = 0;
  options.resume = true;
  const fs::path state = fs::path(options.out_dir) / "step2" / "trainer_state.json";
  const fs::path loss = fs::path(options.out_dir) / "loss.json";
  const auto read = [](const fs::path& path) { std::ifstream in(path); return std::string(std::istreambuf_iterator<char>(in), {}); };
  const std::string good_state = read(state), good_loss = read(loss);
  // The first occurrence of `"key": <number>` in `text`, its number replaced by `value`.
  const auto with = [](std::string text, const std::string& key, const std::string& value) {
    const size_t at = text.find("\"" + key + "\": ");
    EXPECT_NE(at, std::string::npos) << key;
    const size_t begin = at + key.size() + 4, end = text.find_first_of(",}\n", begin);
    return text.replace(begin, end - begin, value);
  };
  for (const auto& [key, value] : std::vector<std::pair<std::string, std::string>>{
           {"step", "1e300"}, {"step", "-1"}, {"epoch", "2.5"}, {"tokens", "\"64\""}, {"steps", "9223372036854775808"},
           {"seed", "-3"}, {"seed", "1.0"}}) {
    std::ofstream(state) << with(good_state, key, value);
    auto resumed = Train(options);
    ASSERT_FALSE(resumed.ok()) << key << " = " << value;
    EXPECT_EQ(resumed.status().code(), absl::StatusCode::kDataLoss) << resumed.status();
    EXPECT_THAT(std::string(resumed.status().message()),
                ::testing::AllOf(::testing::HasSubstr("trainer_state.json"), ::testing::HasSubstr("\"" + key + "\""),
                                 ::testing::HasSubstr("whole number")));
  }
  std::ofstream(state) << good_state;
  std::ofstream(loss) << with(good_loss, "step", "1e300");
  auto resumed = Train(options);
  ASSERT_FALSE(resumed.ok());
  EXPECT_EQ(resumed.status().code(), absl::StatusCode::kDataLoss) << resumed.status();
  EXPECT_THAT(std::string(resumed.status().message()),
              ::testing::AllOf(::testing::HasSubstr("loss.json"), ::testing::HasSubstr("\"step\"")));
  std::ofstream(loss) << good_loss;
  auto finished = Train(options);
  ASSERT_TRUE(finished.ok()) << finished.status();
  EXPECT_EQ(finished->last_step, 4) << "the files as written resume";
}

TEST(Trainer, CheckpointReloadsIntoAFreshModel) {
  const auto dir = FreshDir("reload");
  TrainOptions options = TinyOptions(dir);
  options.model = *models::PresetConfig("llama-tiny");
  options.model.hidden_size = 32;
  options.model.intermediate_size = 64;
  options.position_weights.weighting = PositionWeighting::kInverseRho;
  auto result = Train(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_NE(result->steps.back().objective, result->steps.back().loss);
  const fs::path step = fs::path(options.out_dir) / "step10";
  std::ifstream config_file(step / "config.json");
  auto config = models::ConfigFromHuggingFaceJson(std::string(std::istreambuf_iterator<char>(config_file), {}));
  ASSERT_TRUE(config.ok()) << config.status();
  auto fresh = models::BuildModel(*config, /*seed=*/99);
  ASSERT_TRUE(fresh.ok());
  ASSERT_TRUE(models::LoadWeightsFromPath(**fresh, step.string()).ok());
  torch::NoGradGuard no_grad;
  auto ids = torch::randint(config->vocab_size, {2, 16}, torch::kLong);
  const auto logits = [&](models::DecoderModel& model) {
    return model.Logits(model.Forward(model.Embed(ids), models::ForwardOptions{}).hidden);
  };
  EXPECT_TRUE(torch::equal(logits(**fresh), logits(*result->model)));
}

// Every row of 2025-26 (q/k norms, (1 + w) norms, sandwich and post norms, fused projections,
// soft-capping, NoPE layers, multipliers) trains: gradients reach every parameter, a few steps run,
// and the checkpoint reloads into a fresh model with identical logits.
TEST(Trainer, EveryTodaysRowTrainsAndItsCheckpointReloads) {
  for (const std::string preset : {"qwen3-tiny", "gemma-tiny", "gemma2-tiny", "gemma3-tiny", "phi3-tiny", "olmo2-tiny",
                                   "granite-tiny", "smollm3-tiny"}) {
    SCOPED_TRACE(preset);
    const auto dir = FreshDir("today-" + preset);
    TrainOptions options = TinyOptions(dir);
    options.model = *models::PresetConfig(preset);
    options.model.hidden_size = 32;
    options.model.num_heads = 2;
    options.model.num_kv_heads = 1;
    options.model.intermediate_size = 64;
    options.steps = 3;
    auto result = Train(options);
    ASSERT_TRUE(result.ok()) << result.status();
    ASSERT_EQ(result->steps.size(), 3u);
    EXPECT_TRUE(std::isfinite(result->steps.back().loss));
    const fs::path step = fs::path(options.out_dir) / "step3";
    std::ifstream config_file(step / "config.json");
    auto config = models::ConfigFromHuggingFaceJson(std::string(std::istreambuf_iterator<char>(config_file), {}));
    ASSERT_TRUE(config.ok()) << config.status();
    EXPECT_EQ(config->family, options.model.family);
    auto fresh = models::BuildModel(*config, /*seed=*/99);
    ASSERT_TRUE(fresh.ok()) << fresh.status();
    ASSERT_TRUE(models::LoadWeightsFromPath(**fresh, step.string()).ok());
    auto ids = torch::randint(config->vocab_size, {2, 16}, torch::kLong);
    {
      torch::NoGradGuard no_grad;
      const auto logits = [&](models::DecoderModel& model) {
        return model.Logits(model.Forward(model.Embed(ids), models::ForwardOptions{}).hidden);
      };
      EXPECT_TRUE(torch::equal(logits(**fresh), logits(*result->model)));
    }
    auto logits = (*fresh)->Logits((*fresh)->Forward((*fresh)->Embed(ids), models::ForwardOptions{}).hidden);
    logits.pow(2).mean().backward();
    for (const auto& [name, tensor] : (*fresh)->NamedParameters()) {
      ASSERT_TRUE(tensor.grad().defined()) << name;
      EXPECT_GT(tensor.grad().abs().sum().item<double>(), 0.0) << name;
    }
  }
}

TEST(Trainer, TrainsOnTheGpu_CUDA) {
  const auto dir = FreshDir("cuda");
  TrainOptions options = TinyOptions(dir);
  options.device = "cuda:0";
  options.steps = 30;
  auto result = Train(options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LT(result->steps.back().loss, result->steps.front().loss - 1.0);
}

}  // namespace
}  // namespace posbias::train
