// The density RPC handlers called directly (no transport): limits and request conversions.
#include "server/service/density_requests.h"

#include "gtest/gtest.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

v1::RoutingModel Model(uint32_t depth, double alpha) {
  v1::RoutingModel model;
  model.set_depth(depth);
  model.set_alpha(alpha);
  return model;
}

TEST(HandleEvaluateContinuum, RequiresAnAttentionWeight) {
  v1::EvaluateContinuumRequest request;
  request.mutable_model()->set_depth(3);
  request.mutable_point_list()->add_x(0.5);
  v1::EvaluateContinuumResponse response;
  const auto status = HandleEvaluateContinuum(request, {}, &response);
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_ALPHA");
  EXPECT_EQ(ErrorFieldOf(status), "model.alpha");
}

TEST(HandleEvaluateContinuum, AcceptsAScheduleWhoseLengthIsTheDepth) {
  v1::EvaluateContinuumRequest request;
  for (double alpha : {0.5, 0.25}) request.mutable_model()->mutable_alpha_schedule()->add_alpha(alpha);
  request.mutable_point_list()->add_x(1.0);
  v1::EvaluateContinuumResponse response;
  ASSERT_TRUE(HandleEvaluateContinuum(request, {}, &response).ok());
  EXPECT_EQ(response.depth(), 2u);
  EXPECT_DOUBLE_EQ(response.atom(), 0.375);
  EXPECT_DOUBLE_EQ(response.floor(), 0.5 * 0.75 + 0.25 * 0.5);
}

TEST(HandleEvaluateContinuum, RejectsAGridRunningBackwards) {
  v1::EvaluateContinuumRequest request;
  *request.mutable_model() = Model(3, 0.5);
  request.mutable_grid()->set_start(0.5);
  request.mutable_grid()->set_stop(0.25);
  request.mutable_grid()->set_count(3);
  v1::EvaluateContinuumResponse response;
  const auto status = HandleEvaluateContinuum(request, {}, &response);
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_POINT");
  EXPECT_EQ(ErrorFieldOf(status), "grid.stop");
}

TEST(HandleEvaluateDiscrete, RefusesWorkAboveTheLimit) {
  v1::EvaluateDiscreteRequest request;
  *request.mutable_model() = Model(1000, 0.5);
  request.set_length(1000);
  request.set_summaries_only(true);
  DensityLimits limits;
  limits.max_discrete_work = 1e5;
  v1::EvaluateDiscreteResponse response;
  const auto status = HandleEvaluateDiscrete(request, limits, {}, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorFieldOf(status), "depth * length");
}

TEST(HandleEvaluateDiscrete, StopsWhenTheCallerGoesAway) {
  v1::EvaluateDiscreteRequest request;
  *request.mutable_model() = Model(4, 0.5);
  request.set_length(1 << 20);
  request.set_summaries_only(true);
  v1::EvaluateDiscreteResponse response;
  const auto status = HandleEvaluateDiscrete(request, {}, [] { return false; }, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled);
}

// Found by reading the code: `j += step` wrapped around for a huge step, answering positions
// 5, 4, 3, 2, 1, 0 and a value read from before the array.
TEST(HandleEvaluateDiscrete, AHugeStrideStepSelectsOnlyTheStartPosition) {
  v1::EvaluateDiscreteRequest request;
  *request.mutable_model() = Model(4, 0.5);
  request.set_length(5);
  request.mutable_stride()->set_start(5);
  request.mutable_stride()->set_stop(5);
  request.mutable_stride()->set_step(UINT64_MAX);
  v1::EvaluateDiscreteResponse response;
  ASSERT_TRUE(HandleEvaluateDiscrete(request, {}, {}, &response).ok());
  ASSERT_EQ(response.position_size(), 1);
  EXPECT_EQ(response.position(0), 5u);
  request.mutable_stride()->set_start(2);
  request.mutable_stride()->set_stop(5);
  request.mutable_stride()->set_step(UINT64_MAX - 1);
  response.Clear();
  ASSERT_TRUE(HandleEvaluateDiscrete(request, {}, {}, &response).ok());
  ASSERT_EQ(response.position_size(), 1);
  EXPECT_EQ(response.position(0), 2u);
}

TEST(HandleEvaluateDiscrete, RejectsBandPositionsThatDoNotFit) {
  v1::EvaluateDiscreteRequest request;
  *request.mutable_model() = Model(4, 0.5);
  request.set_length(10);
  request.mutable_summary_options()->mutable_band_positions()->set_leading_end(5);
  request.mutable_summary_options()->mutable_band_positions()->set_trailing_start(3);
  v1::EvaluateDiscreteResponse response;
  EXPECT_EQ(ErrorReasonOf(HandleEvaluateDiscrete(request, {}, {}, &response)), "INVALID_BANDS");
}

TEST(HandleSummarizeProfile, NeedsASource) {
  v1::SummarizeProfileResponse response;
  EXPECT_EQ(ErrorReasonOf(HandleSummarizeProfile({}, {}, &response)), "EMPTY_REQUEST");
}

TEST(HandleFitProfile, RejectsAnUnknownModelValue) {
  v1::FitProfileRequest request;
  for (double value : {3.0, 2.0, 1.0, 2.0}) request.mutable_measured()->add_values(value);
  request.add_models(static_cast<v1::ProfileModel>(7));
  v1::FitProfileResponse response;
  const auto status = HandleFitProfile(request, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(status), "models[0]");
}

}  // namespace
}  // namespace posbias::service
