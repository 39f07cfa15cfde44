// Admission as a table of requests and verdicts: each field the proto bounds is refused with its
// field and reason before anything is allocated; the defaults the server fills are filled.
#include "server/admission/job_admission.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/status/error.h"

namespace posbias::admission {
namespace {

registry::ModelEntry TinyGpt2() {
  registry::ModelEntry model;
  model.name = "tiny";
  model.state = registry::ModelState::kReady;
  model.config = *models::PresetConfig("gpt2-tiny");
  model.config.max_positions = 4096;
  model.memory_bytes = 1 << 20;
  return model;
}

jobs::JobRecord Job(int64_t length = 8) {
  jobs::JobRecord job;
  job.spec.model = "tiny";
  job.spec.length = length;
  job.spec.samples = 2;
  return job;
}

absl::Status Admit(jobs::JobRecord job, const registry::ModelEntry& model = TinyGpt2()) {
  return AdmitJob(job, model, JobLimits{}, 64.0 * (1 << 30));
}

TEST(AdmitJob, TakesAPlainJobAndFillsTheDefaultTimeLimit) {
  jobs::JobRecord job = Job();
  ASSERT_TRUE(AdmitJob(job, TinyGpt2(), JobLimits{}, 0).ok());
  EXPECT_EQ(job.time_limit_seconds, 3600);
}

TEST(AdmitJob, RefusesATimeLimitAboveTheMaximumOrBelowOneSecond) {
  for (double seconds : {86400.5, 0.5, -1.0}) {
    jobs::JobRecord job = Job();
    job.time_limit_seconds = seconds;
    EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.time_limit") << seconds;
  }
}

TEST(AdmitJob, RefusesAGaussianStddevThatIsNotFiniteInZeroToAThousand) {
  for (double stddev : {1e30, 0.0, -1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    jobs::JobRecord job = Job();
    job.spec.input = jobs::JacobianInput::kGaussianEmbeddings;
    job.spec.embedding_std = stddev;
    const absl::Status status = Admit(job);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << stddev;
    EXPECT_EQ(ErrorFieldOf(status), "spec.jacobian_norm.input.gaussian_embeddings.stddev");
  }
  jobs::JobRecord job = Job();
  job.spec.input = jobs::JacobianInput::kGaussianEmbeddings;
  job.spec.embedding_std = 1000;
  EXPECT_TRUE(Admit(job).ok());
}

TEST(AdmitJob, GivenTokensNeedExactlyLIdsWithinTheVocabulary) {
  jobs::JobRecord job = Job(4);
  job.spec.input = jobs::JacobianInput::kGivenTokens;
  job.spec.tokens = {{1, 2, 3, 4}, {5, 6, 7, 8}};
  EXPECT_TRUE(Admit(job).ok());
  job.spec.tokens[1] = {5, 6, 7};
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.input.given_tokens.sequences[1]");
  job.spec.tokens[1] = {5, 6, 7, 8, 9};  // A next token where none is scored.
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.input.given_tokens.sequences[1]");
  job.spec.tokens[1] = {5, 6, 7, TinyGpt2().config.vocab_size};
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.input.given_tokens.sequences[1].token_ids[3]");
  job.spec.output = jobs::JacobianOutput::kLogProb;  // At T = L the next token is required.
  job.spec.tokens = {{1, 2, 3, 4}};
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.input.given_tokens.sequences[0]");
  job.spec.tokens = {{1, 2, 3, 4, 5}};
  EXPECT_TRUE(Admit(job).ok());
}

TEST(AdmitJob, RefusesALayerSweepOfATorchScriptModel) {
  auto model = TinyGpt2();
  model.config.family = models::Family::kTorchScript;
  jobs::JobRecord job = Job();
  job.spec.input = jobs::JacobianInput::kGaussianEmbeddings;
  job.spec.output = jobs::JacobianOutput::kLayerSweep;
  EXPECT_EQ(ErrorFieldOf(Admit(job, model)), "spec.jacobian_norm.output");
}

TEST(AdmitJob, ScalarOutputsAreExactAndNeedAnOutputHead) {
  for (auto output : {jobs::JacobianOutput::kLogProb, jobs::JacobianOutput::kLossGradient}) {
    jobs::JobRecord job = Job();
    job.spec.output = output;
    EXPECT_TRUE(Admit(job).ok());
    job.spec.method = jobs::JacobianMethod::kHutchinson;
    job.spec.probes = 4;
    EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.method");
    auto torchscript = TinyGpt2();
    torchscript.config.family = models::Family::kTorchScript;
    job.spec.method = jobs::JacobianMethod::kExact;
    EXPECT_EQ(ErrorFieldOf(Admit(job, torchscript)), "spec.jacobian_norm.output");
  }
}

TEST(AdmitJob, TheLossGradientScoresEveryNextTokenAndHasNoTarget) {
  jobs::JobRecord job = Job(4);
  job.spec.output = jobs::JacobianOutput::kLossGradient;
  job.spec.input = jobs::JacobianInput::kGivenTokens;
  job.spec.tokens = {{1, 2, 3, 4}};  // The token after position L is missing.
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.input.given_tokens.sequences[0]");
  job.spec.tokens = {{1, 2, 3, 4, 5}};
  EXPECT_TRUE(Admit(job).ok());
  job.spec.target = 4;  // = L: the same loss.
  EXPECT_TRUE(Admit(job).ok());
  job.spec.target = 2;
  const absl::Status target = Admit(job);
  EXPECT_EQ(ErrorFieldOf(target), "spec.jacobian_norm.target_position");
  EXPECT_EQ(ErrorReasonOf(target), "INVALID_POSITION");
  job.spec.target = 0;
  job.spec.compare_pathways = true;
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.compare_pathways");
  job.spec.compare_pathways = false;
  job.spec.input = jobs::JacobianInput::kGaussianEmbeddings;
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "spec.jacobian_norm.input");
}

TEST(AdmitJob, CapsTheRawValuesAJobKeeps) {
  jobs::JobRecord job = Job(4096);  // 2^16 samples x 2^12 positions x 2 layers > 2^27 values.
  job.spec.samples = 65536;
  job.spec.keep_samples = true;
  job.spec.output = jobs::JacobianOutput::kLayerSweep;
  const absl::Status status = Admit(job);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(status), "REQUEST_TOO_LARGE");
}

TEST(AdmitJob, TheMemoryEstimateGrowsWithTheSamples) {
  jobs::JobRecord few = Job(1024), many = Job(1024);
  many.spec.samples = 65536;
  EXPECT_GT(MinimumJobBytes(many.spec, TinyGpt2()), MinimumJobBytes(few.spec, TinyGpt2()) + 1e9);
  // 65536 samples at L = 1024 leave gigabytes of records: refused on a 1 GiB host.
  EXPECT_EQ(ErrorReasonOf(AdmitJob(many, TinyGpt2(), JobLimits{}, 1.0 * (1 << 30))), "INSUFFICIENT_MEMORY");
}

// A built-in preset is not loaded until a job needs it: its weights are estimated from the
// config, embeddings included, and a 7B model is refused on a 24 GiB host before it is built.
TEST(AdmitJob, AnUnloadedPresetIsWeighedByItsConfigEmbeddingsIncluded) {
  registry::ModelEntry mistral = TinyGpt2();
  mistral.name = "mistral-7b";
  mistral.config = *models::PresetConfig("mistral-7b");
  mistral.memory_bytes = 0;
  jobs::JobRecord job = Job(8);
  job.spec.model = mistral.name;
  EXPECT_GE(MinimumJobBytes(job.spec, mistral), 4.0 * 7.2e9);
  const absl::Status status = AdmitJob(job, mistral, JobLimits{}, 24.0 * (1 << 30));
  EXPECT_EQ(ErrorReasonOf(status), "INSUFFICIENT_MEMORY") << status;
  registry::ModelEntry llama = mistral;
  llama.config = *models::PresetConfig("llama3.2-1b");  // 1.24e9 parameters, a fifth in its embedding.
  EXPECT_GE(MinimumJobBytes(job.spec, llama), 4.0 * 1.2e9);
}

TEST(AdmitJob, RefusesMalformedLabelsAndRequestIds) {
  jobs::JobRecord job = Job();
  job.labels = {{"Team", "a"}};
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "labels");
  job.labels = {{"team", "a b"}};
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "labels[\"team\"]");
  job.labels = {};
  job.request_id = std::string(129, 'r');
  EXPECT_EQ(ErrorFieldOf(Admit(job)), "request_id");
}

}  // namespace
}  // namespace posbias::admission
