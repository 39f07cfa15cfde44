// In-process service tests: a real posbias server on a loopback port, called through the real
// client library; metrics scraped over HTTP.
#include "server/app/replica.h"

#include <httplib.h>

#include <filesystem>
#include <future>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "posbias/client.h"
#include "server/metrics/metrics.h"

namespace posbias::app {
namespace {

class ReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_ = std::make_unique<metrics::Metrics>(metrics::BuildInfo{"test", "grpc", "protobuf"});
    Replica::Options options;
    options.listen_address = "127.0.0.1:0";
    options.density_limits.max_points = 1000;
    data_dir_ = std::filesystem::temp_directory_path() / ("posbias_server_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(data_dir_);
    options.data_dir = data_dir_.string();
    server_ = std::make_unique<Replica>(options, metrics_.get());
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<Client>(
        ClientOptions{.target = "127.0.0.1:" + std::to_string(server_->port())});
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::milliseconds(100));
    server_.reset();
    std::filesystem::remove_all(data_dir_);
  }

  static v1::EvaluateContinuumRequest ContinuumRequest(uint32_t depth, double alpha,
                                                       std::initializer_list<double> x) {
    v1::EvaluateContinuumRequest request;
    request.mutable_model()->set_depth(depth);
    request.mutable_model()->set_alpha(alpha);
    for (double value : x) request.mutable_point_list()->add_x(value);
    return request;
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<Replica> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(ReplicaTest, ReportsServingOverallAndForTheDensityService) {
  EXPECT_EQ(*client_->Check(""), ServingStatus::kServing);
  EXPECT_EQ(*client_->Check("posbias.v1.DensityService"), ServingStatus::kServing);
  EXPECT_EQ(*client_->Check("posbias.v1.JobService"), ServingStatus::kServing);
  EXPECT_EQ(*client_->Check("posbias.v1.ModelService"), ServingStatus::kServing);
  EXPECT_EQ(client_->Check("no.such.Service").status().code(), absl::StatusCode::kNotFound);
}

TEST_F(ReplicaTest, EvaluatesTheContinuumAtGivenPoints) {
  auto response = client_->EvaluateContinuum(ContinuumRequest(24, 0.5, {0.5, 1.0}));
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->density_size(), 2);
  EXPECT_NEAR(response->log_density(0), -9.0619683604, 1e-9);
  EXPECT_DOUBLE_EQ(response->atom(), std::pow(0.5, 24));
  EXPECT_DOUBLE_EQ(response->density(1), response->floor());
  EXPECT_EQ(response->cdf(1), 1.0);
  EXPECT_EQ(response->ccdf(1), 0.0);
}

TEST_F(ReplicaTest, EvaluatesOnALogGridEndingExactlyAtItsBounds) {
  v1::EvaluateContinuumRequest request;
  request.mutable_model()->set_depth(12);
  request.mutable_model()->set_alpha(0.25);
  request.mutable_grid()->set_start(1e-8);
  request.mutable_grid()->set_stop(1.0);
  request.mutable_grid()->set_count(9);
  request.add_quantities(v1::DENSITY);
  auto response = client_->EvaluateContinuum(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->x_size(), 9);
  EXPECT_EQ(response->x(0), 1e-8);
  EXPECT_EQ(response->x(8), 1.0);
  EXPECT_NEAR(response->x(1), 1e-7, 1e-20);
  EXPECT_EQ(response->density_size(), 9);
  EXPECT_EQ(response->cdf_size(), 0);  // Only the requested quantity.
}

TEST_F(ReplicaTest, RejectsABadDepthWithItsReasonAndField) {
  auto response = client_->EvaluateContinuum(ContinuumRequest(0, 0.5, {0.5}));
  EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReason(response.status()), "INVALID_DEPTH");
  EXPECT_EQ(ErrorField(response.status()), "depth");
  EXPECT_NE(response.status().message().find("1..100000"), std::string::npos);
}

TEST_F(ReplicaTest, RejectsAlphaOutsideTheUnitIntervalAndNan) {
  for (double alpha : {-0.1, 1.5, std::nan("")}) {
    auto response = client_->EvaluateContinuum(ContinuumRequest(3, alpha, {0.5}));
    EXPECT_EQ(response.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ErrorReason(response.status()), "INVALID_ALPHA");
  }
}

TEST_F(ReplicaTest, RejectsPointsOutsideTheOpenClosedUnitIntervalNamingTheIndex) {
  auto response = client_->EvaluateContinuum(ContinuumRequest(3, 0.5, {0.5, 0.0}));
  EXPECT_EQ(ErrorReason(response.status()), "INVALID_POINT");
  EXPECT_EQ(ErrorField(response.status()), "point_list.x[1]");
  response = client_->EvaluateContinuum(ContinuumRequest(3, 0.5, {}));
  EXPECT_EQ(ErrorReason(response.status()), "EMPTY_REQUEST");
}

TEST_F(ReplicaTest, RefusesMorePointsThanTheLimitAsResourceExhausted) {
  v1::EvaluateContinuumRequest request = ContinuumRequest(3, 0.5, {});
  for (int i = 0; i < 1001; ++i) request.mutable_point_list()->add_x(0.5);
  auto response = client_->EvaluateContinuum(request);
  EXPECT_EQ(response.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReason(response.status()), "REQUEST_TOO_LARGE");
}

TEST_F(ReplicaTest, ReturnsTheDiscreteProfileAtAStrideWithSummaries) {
  v1::EvaluateDiscreteRequest request;
  request.mutable_model()->set_depth(24);
  request.mutable_model()->set_alpha(0.5);
  request.set_length(1000);
  request.mutable_stride()->set_step(100);
  auto response = client_->EvaluateDiscrete(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->position_size(), 10);
  EXPECT_EQ(response->position(9), 901u);
  EXPECT_EQ(response->coherent_size(), 10);
  EXPECT_EQ(response->incoherent_size(), 10);
  EXPECT_NEAR(response->coherent_summary().last_weight(), std::pow(0.5 + 0.5 / 1000, 24), 1e-15);
  EXPECT_EQ(response->coherent_summary().floor_position(), 999u);
  EXPECT_EQ(response->coherent_summary().quantiles_size(), 3);
}

TEST_F(ReplicaTest, SummarizesTenMillionPositionsWhenOnlySummariesAreAsked) {
  v1::EvaluateDiscreteRequest request;
  request.mutable_model()->set_depth(2);
  request.mutable_model()->set_alpha(0.5);
  request.set_length(10'000'000);
  request.set_summaries_only(true);
  request.add_profiles(v1::COHERENT);
  auto response = client_->EvaluateDiscrete(request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->position_size(), 0);
  EXPECT_NEAR(response->coherent_summary().total(), 1.0, 1e-9);
}

TEST_F(ReplicaTest, RefusesTooManyReturnedPositionsAndPositionsOutOfRange) {
  v1::EvaluateDiscreteRequest request;
  request.mutable_model()->set_depth(2);
  request.mutable_model()->set_alpha(0.5);
  request.set_length(2'000'000);
  EXPECT_EQ(ErrorReason(client_->EvaluateDiscrete(request).status()), "REQUEST_TOO_LARGE");
  request.set_length(10);
  request.mutable_positions()->add_position(11);
  auto response = client_->EvaluateDiscrete(request);
  EXPECT_EQ(ErrorReason(response.status()), "INVALID_POSITION");
  EXPECT_EQ(ErrorField(response.status()), "positions.position[0]");
  request.clear_positions();
  request.set_length(0);
  EXPECT_EQ(ErrorReason(client_->EvaluateDiscrete(request).status()), "INVALID_LENGTH");
}

TEST_F(ReplicaTest, SummarizesTheContinuumAndAMeasuredProfile) {
  v1::SummarizeProfileRequest request;
  request.mutable_theory()->mutable_model()->set_depth(24);
  request.mutable_theory()->mutable_model()->set_alpha(0.5);
  auto response = client_->SummarizeProfile(request);
  ASSERT_TRUE(response.ok()) << response.status();
  const auto& summary = response->summary();
  EXPECT_NEAR(summary.leading_mass() + summary.middle_mass() + summary.trailing_mass(), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(summary.last_weight(), std::pow(0.5, 24));
  v1::SummarizeProfileRequest measured;
  for (double value : {4.0, 1.0, 1.0, 2.0}) measured.mutable_measured()->add_values(value);
  response = client_->SummarizeProfile(measured);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_DOUBLE_EQ(response->summary().first_weight(), 0.5);
  EXPECT_EQ(response->summary().floor_position(), 2u);
  EXPECT_DOUBLE_EQ(response->summary().last_token_jump(), 2.0);
}

TEST_F(ReplicaTest, FitsAlphaToAnExactCoherentProfile) {
  v1::EvaluateDiscreteRequest discrete;
  discrete.mutable_model()->set_depth(12);
  discrete.mutable_model()->set_alpha(0.3);
  discrete.set_length(128);
  discrete.add_profiles(v1::COHERENT);
  auto profile = client_->EvaluateDiscrete(discrete);
  ASSERT_TRUE(profile.ok());
  v1::FitProfileRequest request;
  for (double v : profile->coherent()) request.mutable_measured()->add_values(v * v);
  request.mutable_depth()->set_fixed(12);
  request.add_models(v1::COHERENT);
  auto response = client_->FitProfile(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->fits_size(), 1);
  EXPECT_NEAR(response->fits(0).alpha(), 0.3, 1e-6);
  EXPECT_GT(response->fits(0).metrics().spearman(), 0.999);
  EXPECT_LT(response->fits(0).metrics().rmse_log(), 1e-6);
}

TEST_F(ReplicaTest, RejectsAMeasuredProfileWithNanNamingTheIndex) {
  v1::FitProfileRequest request;
  for (double value : {1.0, 2.0, std::nan(""), 3.0}) request.mutable_measured()->add_values(value);
  auto response = client_->FitProfile(request);
  EXPECT_EQ(ErrorReason(response.status()), "INVALID_PROFILE");
  EXPECT_EQ(ErrorField(response.status()), "measured.values[2]");
}

// Submits a gpt2-tiny job (2 layers) of `samples` samples at L = 8 and waits for it to succeed.
std::string RunTinyJob(Client& client, uint32_t samples, bool fit_effective_depth = false) {
  v1::RegisterModelRequest model;
  model.set_name("tiny-theory");
  model.mutable_preset()->set_preset("gpt2-tiny");
  model.mutable_preset()->set_init_seed(5);
  client.RegisterModel(model).IgnoreError();  // Already there from an earlier call: fine.
  v1::SubmitJobRequest submit;
  auto* spec = submit.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("tiny-theory");
  spec->set_sequence_length(8);
  spec->set_samples(samples);
  spec->set_fit_effective_depth(fit_effective_depth);
  auto job = client.SubmitJob(submit);
  EXPECT_TRUE(job.ok()) << job.status();
  v1::WatchJobRequest watch;
  watch.set_id(job->id());
  v1::Job last;
  EXPECT_TRUE(client.WatchJob(watch, [&](const v1::WatchJobResponse& m) { last = m.job(); return true; }).ok());
  EXPECT_EQ(last.state(), v1::JOB_STATE_SUCCEEDED);
  return job->id();
}

TEST_F(ReplicaTest, ResultsCompareTheMeasuredProfileWithFittedAndMeasuredAlphaTheory) {
  v1::GetJobResultRequest request;
  request.set_id(RunTinyJob(*client_, 4));
  auto result = client_->GetJobResult(request);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& theory = result->jacobian_norm().profile().theory();
  EXPECT_EQ(theory.quantity(), v1::SQUARED_NORM);
  ASSERT_EQ(theory.fits_size(), 2);
  for (const auto& fit : theory.fits()) {
    EXPECT_FALSE(fit.has_error());
    EXPECT_GE(fit.alpha(), 0.0);
    EXPECT_LE(fit.alpha(), 1.0);
    EXPECT_NEAR(fit.lambda(), 2 * fit.alpha(), 1e-12);  // lambda = alpha H at the model's depth.
    EXPECT_LE(fit.lambda_sample_low(), fit.lambda_sample_high());
    EXPECT_LT(fit.lambda_sample_low(), fit.lambda_sample_high()) << "4 different samples";
    EXPECT_FALSE(fit.has_effective_depth());  // Fixed at the model's depth.
    ASSERT_EQ(fit.ridge_size(), 1);
    EXPECT_EQ(fit.ridge(0).depth(), 2u);
    EXPECT_DOUBLE_EQ(fit.ridge(0).rmse_log(), fit.rmse_log());
  }
  ASSERT_EQ(theory.curves_size(), 4);  // Coherent and incoherent, measured and fitted alpha.
  int fitted = 0;
  for (const auto& curve : theory.curves()) {
    ASSERT_EQ(curve.profile_size(), 8);
    double sum = 0;
    for (double p : curve.profile()) sum += p;
    EXPECT_NEAR(sum, 1.0, 1e-9);  // All positions on this page.
    EXPECT_GE(curve.metrics().spearman(), -1.0);
    if (curve.alpha_source() == v1::THEORY_ALPHA_SOURCE_FITTED) {
      ++fitted;
      EXPECT_EQ(curve.routing().depth(), 2u);
      EXPECT_TRUE(curve.routing().has_alpha());
    } else {
      EXPECT_EQ(curve.routing().alpha_schedule().alpha_size(), 2);  // The measured branch ratios.
    }
  }
  EXPECT_EQ(fitted, 2);

  request.set_omit_theory(true);  // Curves stay listed with routing and metrics, without profiles.
  auto lean = client_->GetJobResult(request);
  ASSERT_TRUE(lean.ok()) << lean.status();
  const auto& lean_theory = lean->jacobian_norm().profile().theory();
  ASSERT_EQ(lean_theory.curves_size(), 4);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(lean_theory.curves(i).profile_size(), 0);
    EXPECT_DOUBLE_EQ(lean_theory.curves(i).metrics().rmse_log(), theory.curves(i).metrics().rmse_log());
  }
  EXPECT_EQ(lean->jacobian_norm().profile().theory().fits_size(), 2);
}

TEST_F(ReplicaTest, FitsTheEffectiveDepthWhenTheSpecAsksForIt) {
  v1::GetJobResultRequest request;
  request.set_id(RunTinyJob(*client_, 3, /*fit_effective_depth=*/true));
  auto result = client_->GetJobResult(request);
  ASSERT_TRUE(result.ok()) << result.status();
  const auto& theory = result->jacobian_norm().profile().theory();
  ASSERT_EQ(theory.fits_size(), 2);
  for (const auto& fit : theory.fits()) {
    ASSERT_TRUE(fit.has_effective_depth());
    ASSERT_EQ(fit.ridge_size(), 8);  // Depths 1..4 H.
    double best = fit.ridge(0).rmse_log();
    for (int i = 0; i < fit.ridge_size(); ++i) {
      EXPECT_EQ(fit.ridge(i).depth(), static_cast<uint32_t>(i + 1));
      best = std::min(best, fit.ridge(i).rmse_log());
    }
    // The reported depth is the ridge's best. The fit's rmse_log is its metrics', computed apart
    // from the ridge's objective: equal up to rounding (the inputs' seed is drawn per job).
    EXPECT_DOUBLE_EQ(fit.ridge(fit.effective_depth() - 1).rmse_log(), best);
    EXPECT_NEAR(fit.rmse_log(), best, 1e-12 * best);
    EXPECT_NEAR(fit.lambda(), fit.alpha() * fit.effective_depth(), 1e-12);
    EXPECT_LE(fit.lambda_low(), fit.lambda());
    EXPECT_GE(fit.lambda_high(), fit.lambda());
    EXPECT_LE(fit.lambda_sample_low(), fit.lambda_sample_high());
  }
  for (const auto& curve : theory.curves()) {
    if (curve.alpha_source() != v1::THEORY_ALPHA_SOURCE_FITTED) continue;
    EXPECT_GE(curve.routing().depth(), 1u);
    EXPECT_LE(curve.routing().depth(), 8u);
    EXPECT_EQ(curve.profile_size(), 8);
  }
}

TEST_F(ReplicaTest, OneSampleHasNoSamplingSpreadOfLambda) {
  v1::GetJobResultRequest request;
  request.set_id(RunTinyJob(*client_, 1));
  auto result = client_->GetJobResult(request);
  ASSERT_TRUE(result.ok()) << result.status();
  for (const auto& fit : result->jacobian_norm().profile().theory().fits()) {
    EXPECT_EQ(fit.lambda_sample_low(), fit.lambda());
    EXPECT_EQ(fit.lambda_sample_high(), fit.lambda());
  }
}

TEST_F(ReplicaTest, RegistersAModelAndMeasuresItThroughTheQueue) {
  v1::RegisterModelRequest model;
  model.set_name("tiny");
  model.mutable_preset()->set_preset("gpt2-tiny");
  model.mutable_preset()->set_init_seed(3);
  auto registered = client_->RegisterModel(model);
  ASSERT_TRUE(registered.ok()) << registered.status();
  // The preset list states the parameters the built model has (it said 0 before).
  auto presets = client_->ListPresets(v1::ListPresetsRequest());
  ASSERT_TRUE(presets.ok()) << presets.status();
  for (const auto& preset : presets->presets()) {
    if (preset.name() != "gpt2-tiny") continue;
    EXPECT_EQ(preset.parameter_count(), registered->parameter_count());
    EXPECT_EQ(preset.memory_bytes(), 4 * registered->parameter_count());
  }
  v1::SubmitJobRequest submit;
  auto* spec = submit.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("tiny");
  spec->set_sequence_length(6);
  spec->set_samples(2);
  submit.set_request_id("once");
  auto job = client_->SubmitJob(submit);
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(client_->SubmitJob(submit)->id(), job->id());  // A retry returns the same job.
  v1::SubmitJobRequest other = submit;  // The same request_id with another body (AIP-155).
  other.mutable_spec()->mutable_jacobian_norm()->set_sequence_length(5);
  const auto reused = client_->SubmitJob(other);
  EXPECT_EQ(reused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrorReason(reused.status()), "REQUEST_ID_REUSED");
  other = submit;
  other.mutable_labels()->insert({"team", "b"});
  EXPECT_EQ(ErrorReason(client_->SubmitJob(other).status()), "REQUEST_ID_REUSED");
  v1::WatchJobRequest watch;
  watch.set_id(job->id());
  v1::Job last;
  ASSERT_TRUE(client_->WatchJob(watch, [&](const v1::WatchJobResponse& m) { last = m.job(); return true; }).ok());
  EXPECT_EQ(last.state(), v1::JOB_STATE_SUCCEEDED);
  v1::GetJobResultRequest result_request;
  result_request.set_id(job->id());
  auto result = client_->GetJobResult(result_request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->jacobian_norm().profile().stats().sq_norm_mean_size(), 6);
  EXPECT_NE(result->report_json().find("\"sq_norm_stderr\""), std::string::npos);
  // Pages of 4 positions: 1..4, then 5..6 with the rest of the statistics; the report once.
  result_request.set_page_size(4);
  auto page = client_->GetJobResult(result_request);
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->jacobian_norm().positions_size(), 4);
  EXPECT_FALSE(page->next_page_token().empty());
  // The token is bound to the request it continues: another range is refused, not answered with
  // a page of a different query.
  v1::GetJobResultRequest other_range = result_request;
  other_range.set_page_token(page->next_page_token());
  other_range.set_stride(2);
  auto refused = client_->GetJobResult(other_range);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(refused.status().message()).find("different filter"), std::string::npos);
  result_request.set_page_token("4");  // A guessed cursor is not a token.
  EXPECT_EQ(client_->GetJobResult(result_request).status().code(), absl::StatusCode::kInvalidArgument);
  result_request.set_page_token(page->next_page_token());
  auto second = client_->GetJobResult(result_request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->jacobian_norm().positions(0), 5u);
  EXPECT_EQ(second->jacobian_norm().profile().stats().sq_norm_mean(1),
            result->jacobian_norm().profile().stats().sq_norm_mean(5));
  EXPECT_TRUE(second->next_page_token().empty());
  EXPECT_TRUE(second->report_json().empty());
  result_request.set_page_token("");
  result_request.set_include_token_ids(true);
  auto with_tokens = client_->GetJobResult(result_request);
  ASSERT_TRUE(with_tokens.ok()) << with_tokens.status();
  ASSERT_EQ(with_tokens->jacobian_norm().sample_tokens_size(), 2);
  EXPECT_EQ(with_tokens->jacobian_norm().sample_tokens(0).token_ids_size(), 4);
  EXPECT_TRUE(with_tokens->jacobian_norm().sample_tokens(0).has_next_token_id());
  EXPECT_EQ(with_tokens->jacobian_norm().branch_ratios_size(), 2);
  result_request.set_include_raw_samples(true);  // Not kept for this job.
  EXPECT_EQ(client_->GetJobResult(result_request).status().code(), absl::StatusCode::kFailedPrecondition);
  result_request.set_include_raw_samples(false);
  result_request.set_last_position(9);
  EXPECT_EQ(ErrorReason(client_->GetJobResult(result_request).status()), "INVALID_POSITION");
  spec->set_model("missing");
  submit.set_request_id("");
  EXPECT_EQ(ErrorReason(client_->SubmitJob(submit).status()), "MODEL_NOT_FOUND");
  // qwen2-0.5b at L = 131072: the model, every layer's input and one layer's blocked pass with
  // one cotangent row need more than 30 GB.
  spec->set_model("qwen2-0.5b");
  spec->set_sequence_length(131072);
  const auto too_big = client_->SubmitJob(submit);
  EXPECT_EQ(too_big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReason(too_big.status()), "INSUFFICIENT_MEMORY");
}

// compare_pathways through the API: the value pathway next to the full one on every page
// position; under uniform attention the score pathway has nothing to carry, so the ratio is 1.
TEST_F(ReplicaTest, AComparedJobReportsTheValuePathwaysShareOfTheJacobian) {
  auto run = [&](const std::string& model) -> v1::GetJobResultResponse {
    v1::SubmitJobRequest submit;
    auto* spec = submit.mutable_spec()->mutable_jacobian_norm();
    spec->set_model(model);
    spec->set_sequence_length(6);
    spec->set_samples(2);
    spec->set_compare_pathways(true);
    auto job = client_->SubmitJob(submit);
    EXPECT_TRUE(job.ok()) << job.status();
    if (!job.ok()) return {};
    EXPECT_TRUE(job->spec().jacobian_norm().compare_pathways());
    v1::WatchJobRequest watch;
    watch.set_id(job->id());
    v1::Job last;
    EXPECT_TRUE(client_->WatchJob(watch, [&](const v1::WatchJobResponse& m) { last = m.job(); return true; }).ok());
    EXPECT_EQ(last.state(), v1::JOB_STATE_SUCCEEDED) << last.error().message();
    v1::GetJobResultRequest request;
    request.set_id(job->id());
    auto result = client_->GetJobResult(request);
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? *result : v1::GetJobResultResponse{};
  };
  const auto softmax = run("gpt2-tiny");
  const auto& pathways = softmax.jacobian_norm().pathways();
  ASSERT_EQ(pathways.ratio_mean_size(), 6);
  ASSERT_EQ(pathways.value_sq_norm_mean_size(), 6);
  for (int j = 0; j < 6; ++j) {
    EXPECT_GT(pathways.value_sq_norm_mean(j), 0);
    EXPECT_NEAR(pathways.ratio_mean(j), 1.0, 0.1) << "at initialization the score pathway carries little";
  }
  EXPECT_NE(softmax.report_json().find("\"pathways\""), std::string::npos);

  v1::RegisterModelRequest uniform;
  uniform.set_name("tiny-uniform");
  uniform.mutable_preset()->set_preset("gpt2-tiny");
  uniform.mutable_ablations()->set_uniform_attention(true);
  ASSERT_TRUE(client_->RegisterModel(uniform).ok());
  const auto linear = run("tiny-uniform");
  ASSERT_EQ(linear.jacobian_norm().pathways().ratio_mean_size(), 6);
  for (double ratio : linear.jacobian_norm().pathways().ratio_mean()) EXPECT_EQ(ratio, 1.0);

  v1::SubmitJobRequest refused;
  auto* spec = refused.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("gpt2-tiny");
  spec->set_sequence_length(6);
  spec->set_pathway(v1::JACOBIAN_PATHWAY_VALUE_ONLY);
  spec->set_compare_pathways(true);
  EXPECT_EQ(client_->SubmitJob(refused).status().code(), absl::StatusCode::kInvalidArgument);
}

// Found by reading the code: "team=a,sweep=b" was taken as one label "team" with the value
// "a,sweep=b", so a selector of two terms matched nothing.
TEST_F(ReplicaTest, EvaluatesTheDiscreteRowWithASlidingWindowAndRefusesItsContinuum) {
  v1::EvaluateDiscreteRequest request;
  request.mutable_model()->set_depth(3);
  request.mutable_model()->set_alpha(0.5);
  request.mutable_model()->set_attention_window(4);
  request.set_length(40);
  auto response = client_->EvaluateDiscrete(request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->coherent_size(), 40);
  // Influence reaches back at most H * (w - 1) = 9 positions from L = 40.
  EXPECT_EQ(response->coherent(30 - 1), 0.0);
  EXPECT_GT(response->coherent(31 - 1), 0.0);
  v1::EvaluateDiscreteRequest mixed = request;
  mixed.mutable_model()->set_attention_window(0);
  for (uint32_t w : {2u, 0u, 5u}) mixed.mutable_model()->add_layer_windows(w);
  EXPECT_EQ(client_->EvaluateDiscrete(mixed).status().code(), absl::StatusCode::kUnimplemented)
      << "the incoherent profile needs one window for every layer";
  mixed.clear_profiles();
  mixed.add_profiles(v1::COHERENT);
  EXPECT_TRUE(client_->EvaluateDiscrete(mixed).ok());
  // A windowed layer costs more: its work counts 16 times against the H * L limit (default 4e9).
  v1::EvaluateDiscreteRequest heavy;
  heavy.mutable_model()->set_depth(1000);
  heavy.mutable_model()->set_alpha(0.5);
  heavy.mutable_model()->set_attention_window(64);
  heavy.set_length(300000);
  heavy.set_summaries_only(true);
  const auto refused_work = client_->EvaluateDiscrete(heavy);
  EXPECT_EQ(refused_work.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused_work.status().message().find("windowed"), std::string::npos) << refused_work.status();
  auto continuum = ContinuumRequest(3, 0.5, {0.5});
  continuum.mutable_model()->set_attention_window(4);
  const auto refused = client_->EvaluateContinuum(continuum);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(refused.status().message().find("no continuum limit"), std::string::npos) << refused.status();
}

TEST_F(ReplicaTest, RefusesEnumNumbersTheProtoDoesNotDefineInsteadOfReadingThemAsDefaults) {
  v1::RegisterModelRequest model;
  model.set_name("tiny");
  model.mutable_preset()->set_preset("gpt2-tiny");
  model.set_wait(true);
  ASSERT_TRUE(client_->RegisterModel(model).ok());
  v1::SubmitJobRequest submit;
  auto* spec = submit.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("tiny");
  spec->set_sequence_length(6);
  spec->set_dtype(static_cast<v1::ComputeDtype>(99));
  const auto job = client_->SubmitJob(submit);
  EXPECT_EQ(job.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReason(job.status()), "INVALID_ENUM_VALUE");
  EXPECT_NE(job.status().message().find("spec.jacobian_norm.dtype"), std::string::npos) << job.status();
  v1::ExportModelRequest exported;
  exported.set_name("tiny");
  exported.set_dtype(static_cast<v1::ComputeDtype>(-1));
  int messages = 0;
  const absl::Status streamed = client_->ExportModel(exported, [&](const v1::ExportModelResponse&) { return ++messages > 0; });
  EXPECT_EQ(streamed.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReason(streamed), "INVALID_ENUM_VALUE");
  EXPECT_EQ(messages, 0);  // Nothing of the file was streamed.
}

TEST_F(ReplicaTest, ListsJobsMatchingEveryTermOfALabelSelector) {
  v1::SubmitJobRequest submit;
  auto* spec = submit.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("cesaro");
  spec->set_sequence_length(4);
  spec->set_samples(1);
  (*submit.mutable_labels())["team"] = "a";
  (*submit.mutable_labels())["sweep"] = "b";
  auto both = client_->SubmitJob(submit);
  ASSERT_TRUE(both.ok()) << both.status();
  (*submit.mutable_labels())["sweep"] = "c";
  ASSERT_TRUE(client_->SubmitJob(submit).ok());
  v1::ListJobsRequest list;
  list.set_label_selector("team=a,sweep=b");
  auto page = client_->ListJobs(list);
  ASSERT_TRUE(page.ok()) << page.status();
  ASSERT_EQ(page->jobs_size(), 1);
  EXPECT_EQ(page->jobs(0).id(), both->id());
  list.set_label_selector("team=a");
  EXPECT_EQ(client_->ListJobs(list)->jobs_size(), 2);
  list.set_label_selector("team=a, sweep=b");
  EXPECT_EQ(client_->ListJobs(list).status().code(), absl::StatusCode::kInvalidArgument);
  // A page token continues the listing it came from, and only that one.
  list.set_label_selector("team=a");
  list.set_page_size(1);
  auto first = client_->ListJobs(list);
  ASSERT_TRUE(first.ok()) << first.status();
  ASSERT_FALSE(first->next_page_token().empty());
  list.set_page_token(first->next_page_token());
  auto second = client_->ListJobs(list);
  ASSERT_TRUE(second.ok()) << second.status();
  ASSERT_EQ(second->jobs_size(), 1);
  EXPECT_NE(second->jobs(0).id(), first->jobs(0).id());
  list.set_label_selector("team=a,sweep=c");
  EXPECT_EQ(client_->ListJobs(list).status().code(), absl::StatusCode::kInvalidArgument);
  (*submit.mutable_labels())["Bad Key"] = "x";
  const auto refused = client_->SubmitJob(submit);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorField(refused.status()), "labels");
}

TEST_F(ReplicaTest, ExportsRequestCountsLatenciesAndMemoryOverHttp) {
  metrics::MetricsHttpServer http(metrics_.get(), "127.0.0.1", 0);
  ASSERT_TRUE(http.Start().ok());
  ASSERT_TRUE(client_->EvaluateContinuum(ContinuumRequest(3, 0.5, {0.5})).ok());
  ASSERT_FALSE(client_->EvaluateContinuum(ContinuumRequest(0, 0.5, {0.5})).ok());
  httplib::Client scraper("127.0.0.1", http.port());
  auto result = scraper.Get("/metrics");
  ASSERT_TRUE(result);
  EXPECT_EQ(result->status, 200);
  const std::string& body = result->body;
  EXPECT_NE(body.find(R"(posbias_rpc_requests_total{code="OK",method="/posbias.v1.DensityService/EvaluateContinuum"} 1)"), std::string::npos) << body;
  EXPECT_NE(body.find(R"(code="INVALID_ARGUMENT")"), std::string::npos);
  EXPECT_NE(body.find("posbias_rpc_latency_seconds_bucket"), std::string::npos);
  EXPECT_NE(body.find(R"(posbias_points_evaluated_total{kind="continuum"} 1)"), std::string::npos);
  EXPECT_NE(body.find("posbias_rpcs_in_flight 0"), std::string::npos);
  EXPECT_NE(body.find(R"(process_memory_bytes{type="resident"})"), std::string::npos);
  http.Stop();
}

TEST_F(ReplicaTest, DrainsAnInFlightCallBeforeShuttingDown) {
  v1::EvaluateDiscreteRequest request;
  request.mutable_model()->set_depth(24);
  request.mutable_model()->set_alpha(0.5);
  request.set_length(5'000'000);
  request.set_summaries_only(true);
  auto in_flight = std::async(std::launch::async, [&] { return client_->EvaluateDiscrete(request); });
  while (metrics_->rpcs_in_flight().Value() < 1) std::this_thread::yield();
  server_->Shutdown(std::chrono::seconds(60));
  const auto response = in_flight.get();
  EXPECT_TRUE(response.ok()) << response.status();
  EXPECT_FALSE(client_->EvaluateContinuum(ContinuumRequest(3, 0.5, {0.5})).ok());
}

}  // namespace
}  // namespace posbias::app

namespace posbias::app {
namespace {

// A server whose jobs wait: no CPU worker (and no GPU), so a submitted job stays QUEUED.
class NoWorkerReplicaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    metrics_ = std::make_unique<metrics::Metrics>(metrics::BuildInfo{"test", "grpc", "protobuf"});
    Replica::Options options;
    options.listen_address = "127.0.0.1:0";
    options.cpu_worker = false;
    data_dir_ = std::filesystem::temp_directory_path() / ("posbias_noworker_test_" + std::to_string(::getpid()));
    std::filesystem::remove_all(data_dir_);
    options.data_dir = data_dir_.string();
    server_ = std::make_unique<Replica>(options, metrics_.get());
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<Client>(ClientOptions{.target = "127.0.0.1:" + std::to_string(server_->port())});
  }
  void TearDown() override {
    server_->Shutdown(std::chrono::milliseconds(100));
    server_.reset();
    std::filesystem::remove_all(data_dir_);
  }
  absl::StatusOr<v1::Model> Register(const std::string& name, uint64_t seed) {
    v1::RegisterModelRequest model;
    model.set_name(name);
    model.mutable_preset()->set_preset("gpt2-tiny");
    model.mutable_preset()->set_init_seed(seed);
    model.set_wait(true);
    return client_->RegisterModel(model);
  }
  absl::StatusOr<v1::Job> Submit(const std::string& model, const std::vector<std::string>& versus = {}) {
    v1::SubmitJobRequest submit;
    auto* spec = submit.mutable_spec()->mutable_jacobian_norm();
    spec->set_model(model);
    for (const auto& other : versus) spec->add_versus(other);
    spec->set_sequence_length(6);
    spec->set_samples(1);
    return client_->SubmitJob(submit);
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<Replica> server_;
  std::unique_ptr<Client> client_;
};

TEST_F(NoWorkerReplicaTest, AJobIsBoundToTheModelsUidAndAForcedDeletionCancelsAndListsIt) {
  auto first = Register("shared-m", 1);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->uid().size(), 32u);
  EXPECT_GE(first->generation(), 2);
  auto job = Submit("shared-m");
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->model_uid(), first->uid());
  EXPECT_EQ(job->model_weights_sha256(), first->weights_sha256());
  EXPECT_EQ(job->state(), v1::JOB_STATE_QUEUED);

  v1::DeleteModelRequest unforced;
  unforced.set_name("shared-m");
  EXPECT_EQ(ErrorReason(client_->DeleteModel(unforced).status()), "MODEL_IN_USE");
  v1::DeleteModelRequest forced = unforced;
  forced.set_force(true);
  auto deleted = client_->DeleteModel(forced);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ASSERT_EQ(deleted->cancelled_job_ids_size(), 1);
  EXPECT_EQ(deleted->cancelled_job_ids(0), job->id());
  v1::GetJobRequest get;
  get.set_id(job->id());
  EXPECT_EQ(client_->GetJob(get)->state(), v1::JOB_STATE_CANCELLED);

  // The name registered again is another registration: a new uid, and the old job stays cancelled.
  auto second = Register("shared-m", 2);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->uid(), first->uid());
  EXPECT_NE(second->weights_sha256(), first->weights_sha256());
  EXPECT_EQ(client_->GetJob(get)->state(), v1::JOB_STATE_CANCELLED);
  auto next = Submit("shared-m");
  ASSERT_TRUE(next.ok()) << next.status();
  EXPECT_EQ(next->model_uid(), second->uid());
}

TEST_F(NoWorkerReplicaTest, AModelAQueuedComparisonJobMeasuresAfterItsFirstIsInUseToo) {
  ASSERT_TRUE(Register("first-m", 1).ok());
  ASSERT_TRUE(Register("other-m", 2).ok());
  auto job = Submit("first-m", {"init", "other-m"});
  ASSERT_TRUE(job.ok()) << job.status();
  v1::DeleteModelRequest unforced;
  unforced.set_name("other-m");
  EXPECT_EQ(ErrorReason(client_->DeleteModel(unforced).status()), "MODEL_IN_USE");
  v1::GetModelRequest get_model;
  get_model.set_name("other-m");
  EXPECT_EQ(client_->GetModel(get_model)->active_job_count(), 1u);
  v1::DeleteModelRequest forced = unforced;
  forced.set_force(true);
  auto deleted = client_->DeleteModel(forced);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  ASSERT_EQ(deleted->cancelled_job_ids_size(), 1) << "a forced deletion cancels the comparison, as it would its first";
  EXPECT_EQ(deleted->cancelled_job_ids(0), job->id());
}

}  // namespace
}  // namespace posbias::app
