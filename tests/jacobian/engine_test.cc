// The Jacobian-norm engine against independent routes: brute-force autograd per coordinate,
// finite differences, the exact discrete row of the density room (Cesaro model), and its own
// exact method (Hutchinson within its standard error).
#include "server/jacobian/engine.h"

#include <algorithm>
#include <cmath>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "server/density/discrete.h"
#include "server/models/model.h"
#include "server/status/error.h"

namespace posbias::jacobian {
namespace {

using models::ModelConfig;

ModelConfig Tiny(const std::string& family) {
  const std::string preset = family == "pythia" ? "pythia-tiny" : family + "-tiny";
  ModelConfig config = *models::PresetConfig(preset);
  config.num_layers = 2;
  config.hidden_size = 16;
  config.num_heads = 4;
  config.num_kv_heads = family == "gpt2" || family == "pythia" ? 4 : 2;
  config.intermediate_size = 32;
  config.vocab_size = 50;
  if (family == "mistral") config.sliding_window = 3;  // Crosses the 7-position inputs' blocks.
  if (family == "pythia") config.rotary_pct = 0.5;      // 2 of each head's 4 dimensions rotate.
  return config;
}

// Every family with its own reverse pass (the two routes are checked against each other).
const std::vector<std::string> kOwnPassFamilies = {"gpt2", "qwen2", "llama", "mistral", "pythia"};

std::unique_ptr<models::DecoderModel> Build(const ModelConfig& config, uint64_t seed = 3) {
  auto model = models::BuildModel(config, seed);
  EXPECT_TRUE(model.ok()) << model.status();
  return std::move(*model);
}

// ||d hidden[t] / d e_j||_F^2 by one autograd call per output coordinate, in float64.
std::vector<double> BruteForce(models::DecoderModel& model, const std::vector<int64_t>& tokens) {
  model.To(torch::kCPU, torch::kFloat64);
  auto ids = torch::tensor(tokens, torch::kLong).unsqueeze(0);
  auto e = model.Embed(ids).detach().clone().set_requires_grad(true);
  auto y = model.Forward(e, {}).hidden.select(1, ids.size(1) - 1).squeeze(0);
  std::vector<double> sq(ids.size(1), 0.0);
  for (int64_t k = 0; k < y.size(0); ++k) {
    auto g = torch::autograd::grad({y[k]}, {e}, {}, /*retain_graph=*/true)[0].squeeze(0);
    auto per_position = g.pow(2).sum(-1);
    for (int64_t j = 0; j < ids.size(1); ++j) sq[j] += per_position[j].item<double>();
  }
  return sq;
}

MeasureOptions GivenTokens(const std::vector<int64_t>& tokens) {
  MeasureOptions options;
  options.length = static_cast<int64_t>(tokens.size());
  options.input = InputKind::kGivenTokens;
  options.tokens = {tokens};
  options.dtype = torch::kFloat64;
  options.branch_ratios = false;
  return options;
}

void ExpectRelativelyClose(const std::vector<double>& actual, const std::vector<double>& expected, double bound) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t j = 0; j < actual.size(); ++j) {
    EXPECT_LE(std::abs(actual[j] - expected[j]), bound * std::abs(expected[j])) << "position " << j + 1;
  }
}

TEST(DrawTokenIds, AreTheIdsAMeasurementOnRandomTokensDrawsForEverySample) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options;
  options.length = 6;
  options.samples = 3;
  options.seed = 11;
  options.method = Method::kHutchinson;
  options.probes = 2;
  options.first_sample = 1;  // A part: its measurement still draws every sample's ids.
  options.end_sample = 2;
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto drawn = DrawTokenIds(model->config().vocab_size, options);
  EXPECT_EQ(drawn, result->tokens);
  ASSERT_EQ(drawn.size(), 3u);
  EXPECT_EQ(drawn[0].size(), 7u) << "L + 1 ids: the last is the next token";
  options.seed = 12;
  EXPECT_NE(DrawTokenIds(model->config().vocab_size, options), drawn) << "another seed, other ids";
}

TEST(DrawTokenIds, AMeasurementDrawingFromASmallerVocabularySeesTheIdsDrawnBelowIt) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options;
  options.length = 6;
  options.samples = 2;
  options.seed = 11;
  options.method = Method::kHutchinson;
  options.probes = 2;
  options.draw_vocab_size = 17;  // A comparison's first model's vocabulary, smaller than this one's.
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->tokens, DrawTokenIds(17, options));
  for (const auto& sample : result->tokens) {
    for (int64_t id : sample) EXPECT_LT(id, 17);
  }
  options.draw_vocab_size = model->config().vocab_size + 1;
  EXPECT_EQ(ErrorFieldOf(Measure(*model, options).status()), "draw_vocab_size") << "ids the model does not have";
}

class ExactEngine : public ::testing::TestWithParam<std::string> {};

TEST_P(ExactEngine, MatchesBruteForceAutogradPerCoordinate) {
  auto model = Build(Tiny(GetParam()));
  const std::vector<int64_t> tokens = {3, 14, 15, 9, 26, 5, 35};
  const auto expected = BruteForce(*model, tokens);
  MeasureOptions options = GivenTokens(tokens);
  options.cotangent_batch = 5;  // Not a divisor of d: the last batch is padded.
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectRelativelyClose(result->sq_norm[0].mean, expected, 1e-10);
}

TEST_P(ExactEngine, MatchesCentralFiniteDifferences) {
  auto model = Build(Tiny(GetParam()));
  const std::vector<int64_t> tokens = {7, 1, 42, 8};
  model->To(torch::kCPU, torch::kFloat64);
  torch::NoGradGuard no_grad;
  auto e = model->Embed(torch::tensor(tokens, torch::kLong).unsqueeze(0));
  const int64_t d = e.size(2), t = e.size(1) - 1;
  const double h = 1e-5;
  std::vector<double> expected(tokens.size(), 0.0);
  for (int64_t j = 0; j < e.size(1); ++j) {
    for (int64_t i = 0; i < d; ++i) {  // Column i of J_j by a central difference.
      auto plus = e.clone(), minus = e.clone();
      plus[0][j][i] += h;
      minus[0][j][i] -= h;
      auto column = (model->Forward(plus, {}).hidden[0][t] - model->Forward(minus, {}).hidden[0][t]) / (2 * h);
      expected[j] += column.pow(2).sum().item<double>();
    }
  }
  auto result = Measure(*model, GivenTokens(tokens));
  ASSERT_TRUE(result.ok()) << result.status();
  ExpectRelativelyClose(result->sq_norm[0].mean, expected, 1e-6);
}

TEST_P(ExactEngine, GivesTheSameNormsForEveryCotangentBatchSize) {
  auto model = Build(Tiny(GetParam()));
  MeasureOptions options = GivenTokens({1, 2, 3, 4, 5, 6});
  options.cotangent_batch = 1;
  auto one = Measure(*model, options);
  options.cotangent_batch = 16;
  auto all = Measure(*model, options);
  ASSERT_TRUE(one.ok() && all.ok());
  ExpectRelativelyClose(one->sq_norm[0].mean, all->sq_norm[0].mean, 1e-12);
  EXPECT_EQ(one->vjp_count, 16);
}

TEST_P(ExactEngine, GivesTheSameNormsWithActivationCheckpointing) {
  auto model = Build(Tiny(GetParam()));
  MeasureOptions options = GivenTokens({9, 8, 7, 6, 5, 4, 3});
  options.cotangent_batch = 6;
  options.checkpointing = MeasureOptions::Checkpointing::kOff;
  auto plain = Measure(*model, options);
  options.checkpointing = MeasureOptions::Checkpointing::kOn;
  auto recomputed = Measure(*model, options);
  ASSERT_TRUE(plain.ok() && recomputed.ok()) << recomputed.status();
  EXPECT_FALSE(plain->checkpointed);
  EXPECT_TRUE(recomputed->checkpointed);
  ExpectRelativelyClose(recomputed->sq_norm[0].mean, plain->sq_norm[0].mean, 1e-12);
}

TEST(Measure, TurnsCheckpointingOnWhenOneRowExceedsTheMemoryBudget) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options;
  options.length = 16;
  options.memory_budget_bytes = 1024;
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_TRUE(result->checkpointed);
  EXPECT_EQ(result->cotangent_batch, 1);
}

INSTANTIATE_TEST_SUITE_P(Families, ExactEngine, ::testing::Values("gpt2", "qwen2"));

TEST(HutchinsonEngine, AgreesWithTheExactNormWithinItsStandardError) {
  auto model = Build(Tiny("qwen2"));
  MeasureOptions options = GivenTokens({4, 8, 15, 16, 23, 42, 1, 2, 3, 5});
  auto exact = Measure(*model, options);
  options.method = Method::kHutchinson;
  options.probe_distribution = jobs::ProbeDistribution::kGaussian;
  options.probes = 400;
  options.seed = 11;
  auto estimate = Measure(*model, options);
  ASSERT_TRUE(exact.ok() && estimate.ok());
  const auto& se = estimate->estimator_stderr[0];
  int within = 0;
  for (size_t j = 0; j < se.size(); ++j) {
    const double error = std::abs(estimate->sq_norm[0].mean[j] - exact->sq_norm[0].mean[j]);
    within += error <= 3.0 * se[j];
    EXPECT_LE(se[j], std::sqrt(2.0 / 400) * 1.5 * exact->sq_norm[0].mean[j]);  // sqrt(2/K) relative.
  }
  EXPECT_GE(within, 9);  // At 3 standard errors, at most one of ten positions may stray.
}

// d = 16 orthogonal rows are one full rotation: the estimate is the exact norm, with no spread,
// through the model's own reverse pass and through autograd, for the hidden state and the
// log-probability (width 1). Fewer rows are an estimate within its standard error.
TEST(HutchinsonEngine, OrthogonalProbesOfAllDRowsAreTheExactNorm) {
  auto model = Build(Tiny("gpt2"));
  for (auto output : {Output::kFinalHidden, Output::kLogProb}) {
    for (auto pass : {MeasureOptions::ReversePass::kModel, MeasureOptions::ReversePass::kAutograd}) {
      MeasureOptions options = GivenTokens({4, 8, 15, 16, 23, 42, 1, 2, 3, 5, 7});
      options.length = 10;
      options.output = output;
      options.reverse_pass = pass;
      auto exact = Measure(*model, options);
      options.method = Method::kHutchinson;
      options.probe_distribution = jobs::ProbeDistribution::kOrthogonal;
      options.probes = output == Output::kLogProb ? 1 : 16;
      options.cotangent_batch = 5;  // Chunks that cut through the block.
      auto estimate = Measure(*model, options);
      ASSERT_TRUE(exact.ok() && estimate.ok()) << exact.status() << estimate.status();
      ExpectRelativelyClose(estimate->sq_norm[0].mean, exact->sq_norm[0].mean, 1e-10);
      for (double se : estimate->estimator_stderr[0]) EXPECT_LE(se, 1e-9 * exact->sq_norm[0].mean.back());
    }
  }
  MeasureOptions options = GivenTokens({4, 8, 15, 16, 23, 42, 1, 2, 3, 5});
  auto exact = Measure(*model, options);
  for (auto distribution : {jobs::ProbeDistribution::kRademacher, jobs::ProbeDistribution::kOrthogonal}) {
    options.method = Method::kHutchinson;
    options.probe_distribution = distribution;
    // Orthogonal: 6 blocks of 14-15 rows (5 degrees of freedom for the error bar).
    options.probes = distribution == jobs::ProbeDistribution::kOrthogonal ? 88 : 12;
    auto estimate = Measure(*model, options);
    ASSERT_TRUE(exact.ok() && estimate.ok());
    int within = 0;
    for (size_t j = 0; j < 10; ++j) {
      within += std::abs(estimate->sq_norm[0].mean[j] - exact->sq_norm[0].mean[j]) <=
                4.0 * estimate->estimator_stderr[0][j];
    }
    EXPECT_GE(within, 8) << jobs::ProbeDistributionName(distribution);
  }
}

TEST(CesaroModel, MeasuredProfileEqualsTheExactDiscreteRowOfTheDensityRoom) {
  ModelConfig config = *models::PresetConfig("cesaro");
  config.num_layers = 6;
  config.hidden_size = 4;
  config.cesaro_alpha = 0.3;
  auto model = Build(config);
  MeasureOptions options;
  options.length = 40;
  options.input = InputKind::kGaussianEmbeddings;
  options.dtype = torch::kFloat64;
  options.output = Output::kLayerSweep;
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (uint32_t layer = 1; layer <= 6; ++layer) {
    // h_L = sum_j v_j e_j, so J_j = v_j I_d and ||J_j||_F^2 = d v_j^2.
    auto row = density::ComputeDiscreteProfiles(*density::MakeRouting(layer, 0.3), 40);
    ASSERT_TRUE(row.ok());
    std::vector<double> expected;
    for (double v : row->coherent) expected.push_back(4.0 * v * v);
    ExpectRelativelyClose(result->sq_norm[layer - 1].mean, expected, 1e-10);
  }
}

TEST(Measure, ResumedFromFinishedSamplesEqualsAnUninterruptedRun) {
  auto model = Build(Tiny("qwen2"));
  using jobs::ProbeDistribution;
  for (auto [method, distribution] : std::vector<std::pair<Method, ProbeDistribution>>{
           {Method::kExact, ProbeDistribution::kGaussian}, {Method::kHutchinson, ProbeDistribution::kGaussian},
           {Method::kHutchinson, ProbeDistribution::kRademacher}, {Method::kHutchinson, ProbeDistribution::kOrthogonal}}) {
    MeasureOptions options;
    options.length = 6;
    options.samples = 4;
    options.seed = 21;
    options.method = method;
    options.probe_distribution = distribution;
    options.probes = 8;
    std::vector<SampleRecord> records;
    options.on_sample = [&](int64_t index, const SampleRecord& record) {
      EXPECT_EQ(index, static_cast<int64_t>(records.size()));
      records.push_back(record);
      return true;
    };
    auto full = Measure(*model, options);
    ASSERT_TRUE(full.ok()) << full.status();
    options.done_samples.assign(records.begin(), records.begin() + 2);
    records.resize(2);
    auto resumed = Measure(*model, options);
    ASSERT_TRUE(resumed.ok()) << resumed.status();
    EXPECT_EQ(resumed->sq_norm[0].mean, full->sq_norm[0].mean);
    EXPECT_EQ(resumed->sq_norm[0].stderr_mean, full->sq_norm[0].stderr_mean);
    EXPECT_EQ(resumed->tokens, full->tokens);
    EXPECT_EQ(resumed->branch_ratio, full->branch_ratio);
    EXPECT_EQ(resumed->vjp_count, full->vjp_count / 2);  // Only the last two samples ran.
  }
}

// Parts [0, 2), [2, 3) and [3, 5) run separately (as on different workers, one of them resumed
// from its own checkpoint); merged in sample order they equal the unsplit measurement exactly.
TEST(Measure, SampleRangesRunApartAndMergedEqualTheUnsplitMeasurement) {
  auto model = Build(Tiny("gpt2"));
  for (Method method : {Method::kExact, Method::kHutchinson}) {
    MeasureOptions options;
    options.length = 5;
    options.samples = 5;
    options.seed = 8;
    options.method = method;
    options.probes = 6;
    auto whole = Measure(*model, options);
    ASSERT_TRUE(whole.ok()) << whole.status();

    std::vector<SampleRecord> merged;
    for (auto [first, end] : {std::pair<int64_t, int64_t>{0, 2}, {2, 3}, {3, 5}}) {
      MeasureOptions part = options;
      part.first_sample = first;
      part.end_sample = end;
      std::vector<int64_t> computed;
      part.on_sample = [&](int64_t index, const SampleRecord& record) {
        computed.push_back(index);
        merged.push_back(record);
        return true;
      };
      if (first == 3) {  // Resumed: an earlier attempt of this part checkpointed sample 3.
        MeasureOptions earlier = part;
        earlier.end_sample = 4;
        earlier.on_sample = [&](int64_t, const SampleRecord& record) {
          part.done_samples.push_back(record);
          return true;
        };
        ASSERT_TRUE(Measure(*model, earlier).ok());
        ASSERT_EQ(part.done_samples.size(), 1u);
        merged.push_back(part.done_samples.front());
      }
      auto result = Measure(*model, part);
      ASSERT_TRUE(result.ok()) << result.status();
      const std::vector<int64_t> expected_indices =
          first == 3 ? std::vector<int64_t>{4} : first == 0 ? std::vector<int64_t>{0, 1} : std::vector<int64_t>{2};
      EXPECT_EQ(computed, expected_indices);
    }
    ASSERT_EQ(merged.size(), 5u);
    MeasureOptions merge = options;
    merge.done_samples = merged;
    auto combined = Measure(*model, merge);
    ASSERT_TRUE(combined.ok()) << combined.status();
    EXPECT_EQ(combined->vjp_count, 0) << "merging computes nothing";
    EXPECT_EQ(combined->sq_norm[0].mean, whole->sq_norm[0].mean);
    EXPECT_EQ(combined->sq_norm[0].stderr_mean, whole->sq_norm[0].stderr_mean);
    EXPECT_EQ(combined->tokens, whole->tokens);
    EXPECT_EQ(combined->branch_ratio, whole->branch_ratio);
  }
}

TEST(MeasureOptions, RejectsASampleRangeOutsideTheSamples) {
  auto model = Build(Tiny("gpt2"));
  for (auto [first, end] : {std::pair<int64_t, int64_t>{-1, 2}, {2, 2}, {3, 1}, {0, 5}}) {
    MeasureOptions options;
    options.length = 4;
    options.samples = 4;
    options.first_sample = first;
    options.end_sample = end;
    const auto status = CheckMeasureOptions(*model, options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << first << ".." << end;
    EXPECT_NE(status.message().find("first_sample"), std::string::npos) << status;
  }
}

TEST(MeasureOptions, RejectsLengthsBeyondTheModelsPositionsNamingTheField) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options;
  options.length = 10'000;
  const auto status = CheckMeasureOptions(*model, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("length"), std::string::npos);
}

TEST(MeasureOptions, RejectsTokenIdsOutsideTheVocabulary) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options = GivenTokens({1, 2, 99});
  EXPECT_NE(CheckMeasureOptions(*model, options).message().find("tokens[0][2]"), std::string::npos);
}

TEST(Measure, StopsAtTheNextChunkWhenTheCallerCancels) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options;
  options.length = 8;
  options.samples = 3;
  options.cotangent_batch = 4;
  int calls = 0;
  options.progress = [&](const Progress& progress) {
    EXPECT_GT(progress.fraction, 0.0);
    return ++calls < 2;
  };
  const auto result = Measure(*model, options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(calls, 2);
}

// At long L one layer's reverse pass takes minutes: progress moves and a cancel is seen between the
// attention's query blocks, not only between layers. Two layers at L = 1024 in blocks of 256: the
// top layer works on the target row (one block), then its chunk ends; the lower layer has four
// query blocks, and the callback cancels after the first of them.
// A tiny llama able to read `length` positions, and Hutchinson K = 8 options at that length.
std::pair<std::unique_ptr<models::DecoderModel>, MeasureOptions> LongMeasurement(int64_t length) {
  ModelConfig config = Tiny("llama");
  config.max_positions = length;
  MeasureOptions options;
  options.length = length;
  options.method = Method::kHutchinson;
  options.probes = 8;
  options.branch_ratios = false;
  return {Build(config), options};
}

TEST(Measure, MovesProgressAndSeesACancelBetweenAttentionBlocksWithinOneLayer) {
  auto [model, options] = LongMeasurement(1024);
  std::vector<Progress> calls;
  options.progress = [&](const Progress& progress) {
    calls.push_back(progress);
    const bool block_of_lower_layer =
        calls.size() >= 2 && progress.chunks_done == 1 && calls[calls.size() - 2].chunks_done == 1;
    return !block_of_lower_layer;
  };
  const auto result = Measure(*model, options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(calls.size(), 3u);  // A block of the top layer, its chunk's end, a block of the lower one.
  EXPECT_EQ(calls[0].chunks_done, 0);
  EXPECT_EQ(calls.back().chunks_done, 1);  // The lower layer's chunk never ended.
  EXPECT_GT(calls[0].fraction, 0.0);
  EXPECT_LT(calls[0].fraction, calls[1].fraction);
  EXPECT_LT(calls[1].fraction, calls[2].fraction);
  EXPECT_LT(calls[2].fraction, 1.0);
}

// The forward pass of a long sequence beats too (every 64 block pairs): at L = 4096 in blocks of
// 256 the first layer's forward has 136 pairs, so its first beat comes before any reverse work,
// and a cancel there ends the measurement without it.
TEST(Measure, SeesACancelInTheForwardPassOfALongSequence) {
  auto [model, options] = LongMeasurement(4096);
  std::vector<Progress> calls;
  options.progress = [&](const Progress& progress) {
    calls.push_back(progress);
    return false;
  };
  const auto result = Measure(*model, options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled);
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].chunks_done, 0);
  EXPECT_GT(calls[0].fraction, 0.0);
}

TEST(Measure, ReportsProgressUpToOneAndDrawsReproducibleTokens) {
  auto model = Build(Tiny("qwen2"));
  MeasureOptions options;
  options.length = 6;
  options.samples = 2;
  options.seed = 5;
  double last = 0;
  options.progress = [&](const Progress& progress) { last = progress.fraction; return true; };
  auto first = Measure(*model, options);
  auto second = Measure(*model, options);
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_DOUBLE_EQ(last, 1.0);
  EXPECT_EQ(first->tokens, second->tokens);
  EXPECT_EQ(first->sq_norm[0].mean, second->sq_norm[0].mean);
  EXPECT_EQ(first->branch_ratio.size(), 2u);
}

TEST(Measure, MeasuresTheLogProbabilityOfTheNextToken) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options = GivenTokens({1, 2, 3, 4, 5});
  options.length = 4;  // The fifth id is the next token.
  options.output = Output::kLogProb;
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->vjp_count, 1);
  for (double value : result->sq_norm[0].mean) EXPECT_GT(value, 0.0);
}

// The next-token loss over the sample by finite differences of the cross entropy (float64): each
// coordinate of e_j moved by +-h, the loss -sum_t log p(x_{t+1} | x_<=t) recomputed through
// torch's cross_entropy (an independent formula for it), and ||dL/de_j||^2 summed over coordinates.
std::vector<double> LossGradientByFiniteDifferences(models::DecoderModel& model, const std::vector<int64_t>& tokens) {
  torch::NoGradGuard no_grad;
  model.To(torch::kCPU, torch::kFloat64);
  const auto length = static_cast<int64_t>(tokens.size()) - 1;
  auto ids = torch::tensor(std::vector<int64_t>(tokens.begin(), tokens.end() - 1), torch::kLong).unsqueeze(0);
  auto next = torch::tensor(std::vector<int64_t>(tokens.begin() + 1, tokens.end()), torch::kLong);
  auto embeds = model.Embed(ids).clone();
  auto loss = [&](const torch::Tensor& e) {
    auto logits = model.Logits(model.Forward(e, {}).hidden).squeeze(0);
    return torch::nn::functional::cross_entropy(logits, next, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
        .item<double>();
  };
  const double h = 1e-5;
  std::vector<double> sq(length, 0.0);
  for (int64_t j = 0; j < length; ++j) {
    for (int64_t k = 0; k < embeds.size(2); ++k) {
      auto up = embeds.clone(), down = embeds.clone();
      up[0][j][k] += h;
      down[0][j][k] -= h;
      const double derivative = (loss(up) - loss(down)) / (2 * h);
      sq[j] += derivative * derivative;
    }
  }
  return sq;
}

// g_j = ||dL/de_j||^2 of the next-token loss over the sample (THEORY.md section 11): one VJP per
// sample through autograd, equal to finite differences of the cross entropy, for a family with
// learned positions and one with rotary embeddings; nonzero at every position (every position's
// loss reaches back to position 1).
TEST(LossGradient, EqualsFiniteDifferencesOfTheSummedCrossEntropy) {
  for (const std::string family : {"gpt2", "llama"}) {
    auto model = Build(Tiny(family));
    const std::vector<int64_t> tokens = {7, 1, 40, 22, 9, 13, 2};
    MeasureOptions options = GivenTokens(tokens);
    options.length = 6;  // The seventh id is the last position's next token.
    options.output = Output::kLossGradient;
    auto result = Measure(*model, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_EQ(result->vjp_count, 1);
    EXPECT_EQ(result->reverse_pass, "model");  // Its cotangents enter every position of the top layer.
    ExpectRelativelyClose(result->sq_norm[0].mean, LossGradientByFiniteDifferences(*model, tokens), 1e-6);
    for (double value : result->sq_norm[0].mean) EXPECT_GT(value, 0.0) << family;
  }
}

// The loss gradient through the model's own pass (one row, entering every position of the top
// layer through the final norm, the head's cotangent from autograd over the head alone) and
// through autograd over the whole model: two routes, equal in float64 for every family row, with
// activations kept and recomputed.
TEST(LossGradient, TheModelsOwnPassEqualsAutogradForEveryFamilyRow) {
  for (const std::string preset : {"gpt2-tiny", "qwen2-tiny", "llama-tiny", "mistral-tiny", "pythia-tiny", "qwen3-tiny",
                                   "gemma-tiny", "gemma2-tiny", "gemma3-tiny", "phi3-tiny", "olmo2-tiny", "granite-tiny",
                                   "smollm3-tiny"}) {
    auto model = Build(*models::PresetConfig(preset));
    for (auto checkpointing : {MeasureOptions::Checkpointing::kOff, MeasureOptions::Checkpointing::kOn}) {
      SCOPED_TRACE(::testing::Message() << preset << " checkpointing " << static_cast<int>(checkpointing));
      MeasureOptions options = GivenTokens({3, 1, 4, 1, 5, 9, 2, 6, 5});
      options.length = 8;
      options.output = Output::kLossGradient;
      options.checkpointing = checkpointing;
      options.reverse_pass = MeasureOptions::ReversePass::kAutograd;
      auto autograd = Measure(*model, options);
      options.reverse_pass = MeasureOptions::ReversePass::kModel;
      auto own = Measure(*model, options);
      ASSERT_TRUE(autograd.ok() && own.ok()) << autograd.status() << own.status();
      EXPECT_EQ(autograd->reverse_pass, "autograd");
      EXPECT_EQ(own->reverse_pass, "model");
      ExpectRelativelyClose(own->sq_norm[0].mean, autograd->sq_norm[0].mean, 1e-10);
    }
  }
}

TEST(LossGradient, RefusesWhatItCannotMeasure) {
  auto model = Build(Tiny("qwen2"));
  MeasureOptions options = GivenTokens({1, 2, 3, 4, 5});
  options.length = 5;
  options.output = Output::kLossGradient;
  auto refused = [&](MeasureOptions changed, const std::string& field) {
    auto status = CheckMeasureOptions(*model, changed);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << field;
    EXPECT_NE(std::string(status.message()).find(field), std::string::npos) << status;
  };
  refused(options, "tokens[0]");  // L ids: the last position's next token is missing.
  options.length = 4;
  EXPECT_TRUE(CheckMeasureOptions(*model, options).ok());
  MeasureOptions gaussian = options;
  gaussian.input = InputKind::kGaussianEmbeddings;
  refused(gaussian, "input");
  MeasureOptions target = options;
  target.target = 2;
  refused(target, "target");
  MeasureOptions hutchinson = options;
  hutchinson.method = Method::kHutchinson;
  refused(hutchinson, "method");
  MeasureOptions value_only = options;
  value_only.pathway = Pathway::kValueOnly;
  refused(value_only, "pathway");
}

TEST(Measure, RunsInBfloat16WithFloat32Norms) {
  auto model = Build(Tiny("qwen2"));
  MeasureOptions options = GivenTokens({1, 2, 3, 4});
  options.dtype = torch::kFloat32;
  auto reference = Measure(*model, options);
  options.dtype = torch::kBFloat16;
  auto low = Measure(*model, options);
  ASSERT_TRUE(reference.ok() && low.ok()) << low.status();
  ExpectRelativelyClose(low->sq_norm[0].mean, reference->sq_norm[0].mean, 0.1);
  EXPECT_EQ(low->dtype_name, "bfloat16");
}

// The model's own reverse pass and autograd are two independent routes to the same numbers:
// exact and Hutchinson (same probes), for the final hidden state, every layer, and the
// log-probability, at the last and an inner target.
TEST(Measure, ModelReversePassEqualsAutogradForEveryOutputAndMethod) {
  for (const std::string& family : kOwnPassFamilies) {
    auto model = Build(Tiny(family));
    for (Output output : {Output::kFinalHidden, Output::kLayerSweep, Output::kLogProb}) {
      for (auto [method, distribution] : std::vector<std::pair<Method, jobs::ProbeDistribution>>{
               {Method::kExact, jobs::ProbeDistribution::kGaussian},
               {Method::kHutchinson, jobs::ProbeDistribution::kGaussian},
               {Method::kHutchinson, jobs::ProbeDistribution::kOrthogonal}}) {
        for (int64_t target : {int64_t{0}, int64_t{4}}) {
          MeasureOptions options = GivenTokens({3, 1, 4, 1, 5, 9, 2, 6});
          options.length = 7;
          options.output = output;
          options.method = method;
          options.probe_distribution = distribution;
          options.probes = 5;
          options.target = target;
          options.cotangent_batch = 3;
          options.reverse_pass = MeasureOptions::ReversePass::kAutograd;
          auto autograd = Measure(*model, options);
          options.reverse_pass = MeasureOptions::ReversePass::kModel;
          auto own = Measure(*model, options);
          ASSERT_TRUE(autograd.ok() && own.ok()) << own.status();
          EXPECT_EQ(autograd->reverse_pass, "autograd");
          EXPECT_EQ(own->reverse_pass, "model");
          EXPECT_EQ(own->vjp_count, autograd->vjp_count);
          ASSERT_EQ(own->sq_norm.size(), autograd->sq_norm.size());
          for (size_t o = 0; o < own->sq_norm.size(); ++o) {
            SCOPED_TRACE(::testing::Message() << family << " output " << static_cast<int>(output) << " method "
                                              << static_cast<int>(method) << " target " << target << " layer " << o);
            // The log-probability's head runs in float32 on both routes (as Hugging Face does).
            const double bound = output == Output::kLogProb ? 1e-6 : 1e-10;
            ExpectRelativelyClose(own->sq_norm[o].mean, autograd->sq_norm[o].mean, bound);
            if (method == Method::kHutchinson) {
              // Orthogonal rows of width 1 (the log-probability) are exact: both errors are rounding.
              const double floor = 1e-12 * *std::max_element(own->sq_norm[o].mean.begin(), own->sq_norm[o].mean.end());
              const double relative = output == Output::kLogProb ? 1e-5 : 1e-8;
              for (size_t j = 0; j < own->estimator_stderr[o].size(); ++j) {
                EXPECT_LE(std::abs(own->estimator_stderr[o][j] - autograd->estimator_stderr[o][j]),
                          relative * autograd->estimator_stderr[o][j] + floor) << "position " << j + 1;
              }
            }
          }
        }
      }
    }
  }
}

TEST(Measure, UsesTheModelsOwnReversePassWhereItHasOne) {
  auto gpt2 = Build(Tiny("gpt2"));
  ModelConfig cesaro_config = *models::PresetConfig("cesaro");
  cesaro_config.hidden_size = 4;
  auto cesaro = Build(cesaro_config);
  MeasureOptions options;
  options.length = 5;
  options.input = InputKind::kGaussianEmbeddings;
  auto own = Measure(*gpt2, options);
  auto routed = Measure(*cesaro, options);
  ASSERT_TRUE(own.ok() && routed.ok());
  EXPECT_EQ(own->reverse_pass, "model");
  EXPECT_EQ(routed->reverse_pass, "autograd");
  options.reverse_pass = MeasureOptions::ReversePass::kModel;
  const auto status = CheckMeasureOptions(*cesaro, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("reverse_pass"), std::string::npos) << status;
}

TEST(Measure, ModelReversePassRunsInBfloat16CloseToFloat32) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options = GivenTokens({5, 4, 3, 2, 1});
  options.dtype = torch::kFloat32;
  auto reference = Measure(*model, options);
  options.dtype = torch::kBFloat16;
  auto low = Measure(*model, options);
  ASSERT_TRUE(reference.ok() && low.ok()) << low.status();
  EXPECT_EQ(low->reverse_pass, "model");
  ExpectRelativelyClose(low->sq_norm[0].mean, reference->sq_norm[0].mean, 0.1);
}

// ---- the value and score pathways (MeasureOptions::pathway, compare_pathways) ---------------

MeasureOptions PathwayOptions() {
  MeasureOptions options;
  options.length = 7;
  options.samples = 3;
  options.seed = 5;
  options.probes = 5;
  options.dtype = torch::kFloat64;
  options.cotangent_batch = 3;
  options.branch_ratios = false;
  return options;
}

TEST(Pathways, ValueOnlyThroughTheModelsReversePassEqualsAutogradWithDetachedProbabilities) {
  for (const std::string& family : kOwnPassFamilies) {
    auto model = Build(Tiny(family));
    for (Output output : {Output::kFinalHidden, Output::kLayerSweep}) {
      for (Method method : {Method::kExact, Method::kHutchinson}) {
        for (int64_t target : {int64_t{0}, int64_t{4}}) {
          MeasureOptions options = PathwayOptions();
          options.pathway = Pathway::kValueOnly;
          options.output = output;
          options.method = method;
          options.target = target;
          options.reverse_pass = MeasureOptions::ReversePass::kAutograd;
          auto autograd = Measure(*model, options);
          options.reverse_pass = MeasureOptions::ReversePass::kModel;
          auto own = Measure(*model, options);
          ASSERT_TRUE(autograd.ok() && own.ok()) << own.status() << autograd.status();
          for (size_t o = 0; o < own->sq_norm.size(); ++o) {
            SCOPED_TRACE(::testing::Message() << family << " output " << static_cast<int>(output) << " method "
                                              << static_cast<int>(method) << " target " << target << " layer " << o);
            ExpectRelativelyClose(own->sq_norm[o].mean, autograd->sq_norm[o].mean, 1e-10);
          }
        }
      }
    }
  }
}

TEST(Pathways, ValueOnlyEqualsTheFullJacobianExactlyUnderUniformAttention) {
  for (const std::string family : {"gpt2", "qwen2"}) {
    ModelConfig config = Tiny(family);
    config.ablations.uniform_attention = true;
    auto model = Build(config);
    for (auto route : {MeasureOptions::ReversePass::kModel, MeasureOptions::ReversePass::kAutograd}) {
      SCOPED_TRACE(::testing::Message() << family << (route == MeasureOptions::ReversePass::kModel ? " model" : " autograd"));
      MeasureOptions options = PathwayOptions();
      options.reverse_pass = route;
      auto full = Measure(*model, options);
      options.pathway = Pathway::kValueOnly;
      auto value = Measure(*model, options);
      options.pathway = Pathway::kFull;
      options.compare_pathways = true;
      auto both = Measure(*model, options);
      ASSERT_TRUE(full.ok() && value.ok() && both.ok()) << both.status();
      EXPECT_EQ(value->sq_norm[0].mean, full->sq_norm[0].mean);
      EXPECT_EQ(both->value_sq_norm[0].mean, both->sq_norm[0].mean);
      EXPECT_EQ(both->pathway_ratio[0].mean, std::vector<double>(options.length, 1.0));
      EXPECT_EQ(both->pathway_total_ratio[0].mean, 1.0);
      EXPECT_EQ(both->pathway_score_share[0].mean, std::vector<double>(options.length, 0.0));
      EXPECT_EQ(both->pathway_total_score_share[0].mean, 0.0);
    }
  }
}

TEST(Pathways, ComparedInOneRunTheRatioEqualsTwoSeparateRunsWithTheSameSeeds) {
  for (const std::string family : {"gpt2", "qwen2"}) {
    auto model = Build(Tiny(family));
    for (Method method : {Method::kExact, Method::kHutchinson}) {
      SCOPED_TRACE(::testing::Message() << family << " method " << static_cast<int>(method));
      MeasureOptions options = PathwayOptions();
      options.method = method;
      options.target = 5;
      options.keep_samples = true;
      auto full = Measure(*model, options);
      options.pathway = Pathway::kValueOnly;
      auto value = Measure(*model, options);
      options.pathway = Pathway::kFull;
      options.compare_pathways = true;
      auto both = Measure(*model, options);
      ASSERT_TRUE(full.ok() && value.ok() && both.ok()) << both.status();
      ExpectRelativelyClose(both->sq_norm[0].mean, full->sq_norm[0].mean, 1e-14);
      ExpectRelativelyClose(both->value_sq_norm[0].mean, value->sq_norm[0].mean, 1e-14);
      EXPECT_EQ(both->vjp_count, full->vjp_count + value->vjp_count);
      // The ratio per sample, then its mean and spread over the samples.
      const auto& f = full->raw[0];
      const auto& v = value->raw[0];
      const double n = static_cast<double>(f.size());
      std::vector<double> mean(options.length, 0.0), std(options.length, 0.0);
      double total_mean = 0;
      for (size_t s = 0; s < f.size(); ++s) {
        double sum_v = 0, sum_f = 0;
        for (int64_t j = 0; j < options.length; ++j) {
          if (j < options.target) mean[j] += v[s][j] / f[s][j] / n;
          sum_v += v[s][j], sum_f += f[s][j];
        }
        total_mean += sum_v / sum_f / n;
      }
      for (size_t s = 0; s < f.size(); ++s) {
        for (int64_t j = 0; j < options.target; ++j) std[j] += std::pow(v[s][j] / f[s][j] - mean[j], 2) / (n - 1);
      }
      const auto& ratio = both->pathway_ratio[0];
      for (int64_t j = 0; j < options.length; ++j) {
        if (j >= options.target) {  // After the target: no Jacobian, no ratio.
          EXPECT_TRUE(std::isnan(ratio.mean[j])) << "position " << j + 1;
          continue;
        }
        EXPECT_NEAR(ratio.mean[j], mean[j], 1e-13) << "position " << j + 1;
        EXPECT_NEAR(ratio.std[j], std::sqrt(std[j]), 1e-12) << "position " << j + 1;
        EXPECT_NEAR(ratio.stderr_mean[j], std::sqrt(std[j] / n), 1e-12) << "position " << j + 1;
        EXPECT_LT(ratio.mean[j], 1.5);
      }
      EXPECT_NEAR(both->pathway_total_ratio[0].mean, total_mean, 1e-13);
    }
  }
}

// At the Hugging Face initialization q.k is small, so the softmax barely moves with the inputs:
// the value pathway carries almost all of ||J||^2 (README, "Value and score pathways": the
// presets' measured share is ~1e-4 in total and below 2e-3 at every position at L = 64).
TEST(Pathways, AtInitializationTheScorePathwaysShareIsSmall) {
  for (const std::string preset : {"gpt2-tiny", "qwen2-tiny"}) {
    SCOPED_TRACE(preset);
    auto model = Build(*models::PresetConfig(preset), 0);
    MeasureOptions options;
    options.length = 32;
    options.samples = 2;
    options.compare_pathways = true;
    options.branch_ratios = false;
    auto result = Measure(*model, options);
    ASSERT_TRUE(result.ok()) << result.status();
    EXPECT_LE(std::abs(1.0 - result->pathway_total_ratio[0].mean), 2e-3);
    for (double ratio : result->pathway_ratio[0].mean) EXPECT_LE(std::abs(1.0 - ratio), 1e-2);
  }
}

// The decomposition on Jacobians whose answer is known, as squared norms of J_full = J_value +
// J_score.
TEST(PathwayShares, OrthogonalPathwaysOfEqualNormSplitTheJacobianInHalves) {
  // J_value = (1, 0), J_score = (0, 1): ||J_full||^2 = 2.
  const auto shares = SharesOfPathways(torch::tensor({2.0}, torch::kDouble), torch::tensor({1.0}, torch::kDouble),
                                       torch::tensor({1.0}, torch::kDouble));
  EXPECT_DOUBLE_EQ(shares.ratio.item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(shares.score_share.item<double>(), 0.5);
  EXPECT_DOUBLE_EQ(shares.interference_share.item<double>(), 0.0);
  EXPECT_DOUBLE_EQ(shares.cosine.item<double>(), 0.0);
}

TEST(PathwayShares, CancellingPathwaysGiveRatioOneAndALargeScoreShare) {
  // J_value = (1, 0), J_score = (-2, 0): J_full = -J_value, so ||J_value||^2 / ||J_full||^2 = 1
  // although the score pathway is twice the value pathway.
  const auto shares = SharesOfPathways(torch::tensor({1.0}, torch::kDouble), torch::tensor({1.0}, torch::kDouble),
                                       torch::tensor({4.0}, torch::kDouble));
  EXPECT_DOUBLE_EQ(shares.ratio.item<double>(), 1.0);
  EXPECT_DOUBLE_EQ(shares.score_share.item<double>(), 4.0);
  EXPECT_DOUBLE_EQ(shares.interference_share.item<double>(), -4.0);
  EXPECT_DOUBLE_EQ(shares.cosine.item<double>(), -1.0);
  // Undefined where ||J_full|| = 0 (after the target), and the cosine where a pathway is 0.
  const auto zero = SharesOfPathways(torch::tensor({0.0, 1.0}, torch::kDouble), torch::tensor({0.0, 1.0}, torch::kDouble),
                                     torch::tensor({0.0, 0.0}, torch::kDouble));
  EXPECT_TRUE(std::isnan(zero.ratio[0].item<double>()));
  EXPECT_TRUE(std::isnan(zero.cosine[1].item<double>()));
}

// ||J_full,j - J_value,j||^2 and 2 <J_value,j, J_score,j> per position by brute force: one
// autograd call per output coordinate through each pathway, in float64.
struct BruteForcePathways {
  std::vector<double> full, value, score, interference;
};
BruteForcePathways BruteForceBothPathways(models::DecoderModel& model, const std::vector<int64_t>& tokens) {
  model.To(torch::kCPU, torch::kFloat64);
  auto ids = torch::tensor(tokens, torch::kLong).unsqueeze(0);
  auto e = model.Embed(ids).detach().clone().set_requires_grad(true);
  models::ForwardOptions detached;
  detached.detach_attention_probabilities = true;
  auto y_full = model.Forward(e, {}).hidden.select(1, ids.size(1) - 1).squeeze(0);
  auto y_value = model.Forward(e, detached).hidden.select(1, ids.size(1) - 1).squeeze(0);
  const int64_t length = ids.size(1);
  BruteForcePathways out{std::vector<double>(length), std::vector<double>(length), std::vector<double>(length),
                         std::vector<double>(length)};
  for (int64_t k = 0; k < y_full.size(0); ++k) {
    auto gf = torch::autograd::grad({y_full[k]}, {e}, {}, true)[0].squeeze(0);
    auto gv = torch::autograd::grad({y_value[k]}, {e}, {}, true)[0].squeeze(0);
    auto gs = gf - gv;
    for (int64_t j = 0; j < length; ++j) {
      out.full[j] += gf[j].pow(2).sum().item<double>();
      out.value[j] += gv[j].pow(2).sum().item<double>();
      out.score[j] += gs[j].pow(2).sum().item<double>();
      out.interference[j] += 2 * (gv[j] * gs[j]).sum().item<double>();
    }
  }
  return out;
}

TEST(Pathways, TheScoreAndInterferenceSharesMatchBruteForceAndTheThreeSharesSumToOne) {
  const std::vector<int64_t> tokens = {3, 14, 15, 9, 2, 6, 5};
  for (const std::string family : {"gpt2", "qwen2"}) {
    ModelConfig config = Tiny(family);
    auto model = Build(config);
    // Scale the query projections up so that attention is far from uniform and the score pathway
    // is large (at initialization it is ~1e-4 of the total).
    {
      torch::NoGradGuard no_grad;
      for (auto& [name, tensor] : model->NamedParameters()) {
        if (name.find("q_proj.weight") != std::string::npos || name.find("c_attn.weight") != std::string::npos) {
          tensor.mul_(30.0);
        }
      }
    }
    const auto expected = BruteForceBothPathways(*model, tokens);
    for (auto route : {MeasureOptions::ReversePass::kModel, MeasureOptions::ReversePass::kAutograd}) {
      SCOPED_TRACE(::testing::Message() << family << (route == MeasureOptions::ReversePass::kModel ? " model" : " autograd"));
      MeasureOptions options = GivenTokens(tokens);
      options.compare_pathways = true;
      options.reverse_pass = route;
      auto result = Measure(*model, options);
      ASSERT_TRUE(result.ok()) << result.status();
      const auto& score = result->pathway_score_share[0].mean;
      const auto& interference = result->pathway_interference_share[0].mean;
      const auto& ratio = result->pathway_ratio[0].mean;
      double largest_score = 0;
      for (size_t j = 0; j < tokens.size(); ++j) {
        EXPECT_NEAR(score[j], expected.score[j] / expected.full[j], 1e-10) << "position " << j + 1;
        EXPECT_NEAR(interference[j], expected.interference[j] / expected.full[j], 1e-10) << "position " << j + 1;
        EXPECT_NEAR(ratio[j] + score[j] + interference[j], 1.0, 1e-12) << "position " << j + 1;
        EXPECT_GE(score[j], 0.0);
        const double cosine = result->pathway_cosine[0].mean[j];
        EXPECT_GE(cosine, -1.0);
        EXPECT_LE(cosine, 1.0);
        largest_score = std::max(largest_score, score[j]);
      }
      EXPECT_GT(largest_score, 1e-3) << "the test must exercise a score pathway that is not negligible";
      EXPECT_NEAR(result->pathway_total_ratio[0].mean + result->pathway_total_score_share[0].mean +
                      result->pathway_total_interference_share[0].mean,
                  1.0, 1e-12);
    }
  }
}

TEST(Pathways, WithHutchinsonProbesTheSharesStillSumToOnePerSample) {
  auto model = Build(Tiny("qwen2"));
  MeasureOptions options = PathwayOptions();
  options.method = Method::kHutchinson;
  options.compare_pathways = true;
  auto result = Measure(*model, options);
  ASSERT_TRUE(result.ok()) << result.status();
  for (int64_t j = 0; j < options.length; ++j) {
    EXPECT_NEAR(result->pathway_ratio[0].mean[j] + result->pathway_score_share[0].mean[j] +
                    result->pathway_interference_share[0].mean[j],
                1.0, 1e-12);
    EXPECT_GE(result->pathway_score_share[0].mean[j], 0.0);
  }
}

TEST(MeasureOptions, RejectsComparingPathwaysFromTheValuePathwayOrFromRecordsWithoutIt) {
  auto model = Build(Tiny("gpt2"));
  MeasureOptions options = PathwayOptions();
  options.compare_pathways = true;
  options.pathway = Pathway::kValueOnly;
  auto status = CheckMeasureOptions(*model, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("pathway"), std::string::npos) << status;
  options.pathway = Pathway::kFull;
  options.done_samples.push_back({{std::vector<double>(options.length, 1.0)}, {}, {}, {}, {}, {}});
  status = CheckMeasureOptions(*model, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(status.message().find("done_samples"), std::string::npos) << status;
}

TEST(Measure, RunsOnTheGpu_CUDA) {
  auto model = Build(Tiny("qwen2"));
  MeasureOptions options = GivenTokens({1, 2, 3, 4, 5, 6, 7, 8});
  auto cpu = Measure(*model, options);
  options.device = "cuda:0";
  auto gpu = Measure(*model, options);
  ASSERT_TRUE(cpu.ok() && gpu.ok()) << gpu.status();
  ExpectRelativelyClose(gpu->sq_norm[0].mean, cpu->sq_norm[0].mean, 1e-8);
}

}  // namespace
}  // namespace posbias::jacobian
