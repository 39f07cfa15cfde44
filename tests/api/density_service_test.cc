// The density RPC handlers (declared in the generated v1_handlers.h) called
// directly, with no transport: limits and request conversions.
#include "server/api/density_requests.h"

#include "gtest/gtest.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

// A handler's answer to a caller who stays (or, with `gone`, has left), under `limits`.
template <typename Handle, typename Request>
auto Answer(Handle handle, const Request& request, DensityLimits limits = {}, bool gone = false) {
  DensityRequests service{limits, nullptr};
  Caller caller;
  if (gone) caller.client_gone = [] { return true; };
  return handle(service, caller, request);
}

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
  const auto status = Answer(HandleEvaluateContinuum, request).status();
  EXPECT_EQ(ErrorReasonOf(status), "INVALID_ALPHA");
  EXPECT_EQ(ErrorFieldOf(status), "model.alpha");
}

TEST(HandleEvaluateContinuum, AcceptsAScheduleWhoseLengthIsTheDepth) {
  v1::EvaluateContinuumRequest request;
  for (double alpha : {0.5, 0.25}) request.mutable_model()->mutable_alpha_schedule()->add_alpha(alpha);
  request.mutable_point_list()->add_x(1.0);
  const auto response = Answer(HandleEvaluateContinuum, request);
  ASSERT_TRUE(response.ok()) << response.status();
  EXPECT_EQ(response->depth(), 2u);
  EXPECT_DOUBLE_EQ(response->atom(), 0.375);
  EXPECT_DOUBLE_EQ(response->floor(), 0.5 * 0.75 + 0.25 * 0.5);
}

TEST(HandleEvaluateContinuum, RejectsAGridRunningBackwards) {
  v1::EvaluateContinuumRequest request;
  *request.mutable_model() = Model(3, 0.5);
  request.mutable_grid()->set_start(0.5);
  request.mutable_grid()->set_stop(0.25);
  request.mutable_grid()->set_count(3);
  const auto status = Answer(HandleEvaluateContinuum, request).status();
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
  const auto status = Answer(HandleEvaluateDiscrete, request, limits).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorFieldOf(status), "depth * length");
}

TEST(HandleEvaluateDiscrete, StopsWhenTheCallerGoesAway) {
  v1::EvaluateDiscreteRequest request;
  *request.mutable_model() = Model(4, 0.5);
  request.set_length(1 << 20);
  request.set_summaries_only(true);
  const auto status = Answer(HandleEvaluateDiscrete, request, {}, /*gone=*/true).status();
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
  auto response = Answer(HandleEvaluateDiscrete, request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->position_size(), 1);
  EXPECT_EQ(response->position(0), 5u);
  request.mutable_stride()->set_start(2);
  request.mutable_stride()->set_stop(5);
  request.mutable_stride()->set_step(UINT64_MAX - 1);
  response = Answer(HandleEvaluateDiscrete, request);
  ASSERT_TRUE(response.ok()) << response.status();
  ASSERT_EQ(response->position_size(), 1);
  EXPECT_EQ(response->position(0), 2u);
}

TEST(HandleEvaluateDiscrete, RejectsBandPositionsThatDoNotFit) {
  v1::EvaluateDiscreteRequest request;
  *request.mutable_model() = Model(4, 0.5);
  request.set_length(10);
  request.mutable_summary_options()->mutable_band_positions()->set_leading_end(5);
  request.mutable_summary_options()->mutable_band_positions()->set_trailing_start(3);
  EXPECT_EQ(ErrorReasonOf(Answer(HandleEvaluateDiscrete, request).status()), "INVALID_BANDS");
}

TEST(HandleSummarizeProfile, NeedsASource) {
  EXPECT_EQ(ErrorReasonOf(Answer(HandleSummarizeProfile, v1::SummarizeProfileRequest{}).status()), "EMPTY_REQUEST");
}

TEST(HandleFitProfile, RejectsAnUnknownModelValue) {
  v1::FitProfileRequest request;
  for (double value : {3.0, 2.0, 1.0, 2.0}) request.mutable_measured()->add_values(value);
  request.add_models(static_cast<v1::ProfileModel>(7));
  const auto status = Answer(HandleFitProfile, request).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(status), "models[0]");
}

}  // namespace
}  // namespace posbias::api
