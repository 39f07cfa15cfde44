#include "server/api/density_convert.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::api {

namespace {

absl::StatusOr<density::Routing> WeightsFromProto(const v1::RoutingModel& model) {
  switch (model.attention_weight_case()) {
    case v1::RoutingModel::kAlpha:
      return density::MakeRouting(model.depth(), model.alpha());
    case v1::RoutingModel::kAlphaSchedule: {
      const auto& alphas = model.alpha_schedule().alpha();
      return density::MakeScheduledRouting(model.depth(), {alphas.begin(), alphas.end()});
    }
    default:
      return InvalidArgumentError({ErrorReason::kInvalidAlpha, "model.alpha", "not set",
                                   "alpha in [0, 1] or alpha_schedule"});
  }
}

}  // namespace

absl::StatusOr<density::Routing> RoutingFromProto(const v1::RoutingModel& model) {
  auto routing = WeightsFromProto(model);
  if (!routing.ok()) return routing;
  return density::WithAttentionWindows(*std::move(routing), model.attention_window(),
                                       {model.layer_windows().begin(), model.layer_windows().end()});
}

absl::StatusOr<density::SummaryOptions> SummaryOptionsFromProto(const v1::SummaryOptions& options,
                                                                uint64_t length) {
  density::SummaryOptions result;
  if (options.has_band_fractions()) {
    result.leading_fraction = options.band_fractions().leading();
    result.trailing_fraction = options.band_fractions().trailing();
  } else if (options.has_band_positions()) {
    result.use_positions = true;
    result.leading_end = options.band_positions().leading_end();
    result.trailing_start = options.band_positions().trailing_start();
  }
  if (!options.quantile_levels().empty()) {
    result.quantile_levels.assign(options.quantile_levels().begin(),
                                  options.quantile_levels().end());
  }
  if (auto status = density::CheckSummaryOptions(result, length); !status.ok()) return status;
  return result;
}

void SummaryToProto(const density::ProfileSummary& summary, v1::ProfileSummary* out) {
  out->set_length(summary.length);
  out->set_total(summary.total);
  out->set_first_weight(summary.first_weight);
  out->set_last_weight(summary.last_weight);
  out->set_floor_value(summary.floor_value);
  out->set_floor_position(summary.floor_position);
  out->set_floor_x(summary.floor_x);
  out->set_leading_mass(summary.leading_mass);
  out->set_middle_mass(summary.middle_mass);
  out->set_trailing_mass(summary.trailing_mass);
  out->set_last_token_jump(summary.last_token_jump);
  for (const auto& quantile : summary.quantiles) {
    auto* point = out->add_quantiles();
    point->set_level(quantile.level);
    point->set_position(quantile.position);
    point->set_x(quantile.x);
  }
}

absl::StatusOr<std::vector<density::Model>> ModelsFromProto(
    const google::protobuf::RepeatedField<int>& models, const std::string& field) {
  if (models.empty()) return std::vector{density::Model::kCoherent, density::Model::kIncoherent};
  std::vector<density::Model> result;
  for (int i = 0; i < models.size(); ++i) {
    if (models[i] == v1::COHERENT) {
      result.push_back(density::Model::kCoherent);
    } else if (models[i] == v1::INCOHERENT) {
      result.push_back(density::Model::kIncoherent);
    } else {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat(field, "[", i, "]"),
                                   std::to_string(models[i]), "COHERENT (1) or INCOHERENT (2)"});
    }
  }
  return result;
}

absl::StatusOr<density::FitOptions> FitOptionsFromProto(const v1::FitProfileRequest& request) {
  density::FitOptions options;
  switch (request.quantity()) {
    case v1::PROFILE_QUANTITY_UNSPECIFIED:
    case v1::SQUARED_NORM: options.quantity = density::Quantity::kSquaredNorm; break;
    case v1::NORM: options.quantity = density::Quantity::kNorm; break;
    case v1::WEIGHT: options.quantity = density::Quantity::kWeight; break;
    default:
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "quantity",
                                   std::to_string(request.quantity()),
                                   "SQUARED_NORM, NORM or WEIGHT"});
  }
  auto models = ModelsFromProto(request.models(), "models");
  if (!models.ok()) return models.status();
  options.models = *std::move(models);
  if (request.depth().has_fixed()) {
    options.min_depth = options.max_depth = request.depth().fixed();
  } else if (request.depth().has_range()) {
    options.min_depth = request.depth().range().min();
    options.max_depth = request.depth().range().max();
  }
  options.include_profiles = request.include_profiles();
  options.attention_window = request.attention_window();
  if (request.layer_windows_size() > static_cast<int>(density::kMaxFitDepth)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "layer_windows",
                                 absl::StrCat(request.layer_windows_size(), " entries"),
                                 absl::StrCat("at most ", density::kMaxFitDepth, " (one per layer)")});
  }
  options.layer_windows.assign(request.layer_windows().begin(), request.layer_windows().end());
  if (density::WindowsDiffer(options.layer_windows) && request.models_size() == 0) {
    options.models = {density::Model::kCoherent};
  }
  return options;
}

void FitMetricsToProto(const density::ComparisonMetrics& m, v1::FitMetrics* out) {
  out->set_spearman(m.spearman);
  out->set_pearson_log(m.pearson_log);
  out->set_rmse_log(m.rmse_log);
  out->set_ks(m.ks);
  out->set_wasserstein1(m.wasserstein1);
  out->set_measured_last_weight(m.measured_last_weight);
  out->set_model_last_weight(m.model_last_weight);
  out->set_measured_floor(m.measured_floor);
  out->set_model_floor(m.model_floor);
  out->set_measured_last_jump(m.measured_last_jump);
  out->set_model_last_jump(m.model_last_jump);
}

void ModelFitToProto(const density::ModelFit& fit, v1::ModelFit* out) {
  out->set_model(fit.model == density::Model::kCoherent ? v1::COHERENT : v1::INCOHERENT);
  out->set_depth(fit.depth);
  out->set_alpha(fit.alpha);
  out->set_lambda(fit.lambda);
  out->set_lambda_low(fit.lambda_low);
  out->set_lambda_high(fit.lambda_high);
  FitMetricsToProto(fit.metrics, out->mutable_metrics());
  for (const auto& point : fit.ridge) {
    auto* ridge = out->add_ridge();
    ridge->set_depth(point.depth);
    ridge->set_alpha(point.alpha);
    ridge->set_rmse_log(point.rmse_log);
  }
  out->mutable_profile()->Add(fit.profile.begin(), fit.profile.end());
}

}  // namespace posbias::api
