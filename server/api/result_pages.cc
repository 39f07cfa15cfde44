#include "server/api/result_pages.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/paging/page_token.h"
#include "server/api/job_convert.h"
#include "server/api/density_convert.h"
#include "server/limits/limits.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

v1::ProfileModel ModelToProto(jobs::TheoryModel model) {
  return model == jobs::TheoryModel::kCoherent ? v1::COHERENT : v1::INCOHERENT;
}

// The report's theory as the proto's comparison: one fit per model, at the model's depth (its
// ridge is that one depth) or, with `effective_depth`, over the depths the report tried
// (1..min(4 H, 64)) with the best one, its ridge and interval; and one curve per (model, alpha
// source) with the prediction at the page's positions (left empty with omit_theory).
class TheoryPage {
 public:
  TheoryPage(const std::vector<uint32_t>& positions, bool omit_profiles, v1::JobTheoryComparison* out)
      : positions_(positions), omit_profiles_(omit_profiles), out_(out) {}

  void Fill(const jobs::TheoryComparison& theory) {
    out_->set_quantity(v1::SQUARED_NORM);
    if (const auto& measured = theory.measured_alpha_schedule) AddMeasuredAlphaCurves(*measured);
    if (!theory.fits) {
      for (auto model : {v1::COHERENT, v1::INCOHERENT}) {
        auto* fit = out_->add_fits();
        fit->set_model(model);
        fit->mutable_error()->set_reason(v1::INVALID_PROFILE);
        fit->mutable_error()->set_code(static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
        fit->mutable_error()->set_message(theory.note.value_or("no fit"));
      }
      return;
    }
    const bool effective = theory.fit_effective_depth.value_or(false) && theory.effective_depth_fits;
    if (effective) {
      for (const auto& fit : *theory.effective_depth_fits) AddEffectiveDepthFit(fit);
    } else {
      for (const auto& fit : *theory.fits) AddFixedDepthFit(fit, static_cast<uint32_t>(theory.depth));
    }
  }

 private:
  v1::JobTheoryCurve* AddCurve(v1::ProfileModel model, v1::TheoryAlphaSource source, const std::vector<double>& profile,
                               const jobs::ReportMetrics& metrics) {
    auto* curve = out_->add_curves();
    curve->set_model(model);
    curve->set_alpha_source(source);
    FitMetricsToProto(metrics, curve->mutable_metrics());
    if (omit_profiles_) return curve;
    for (uint32_t position : positions_) curve->add_profile(position <= profile.size() ? profile[position - 1] : 0.0);
    return curve;
  }

  void AddMeasuredAlphaCurves(const jobs::MeasuredAlphaTheory& measured) {
    const std::pair<v1::ProfileModel, std::pair<const std::vector<double>*, const jobs::ReportMetrics*>> curves[] = {
        {v1::COHERENT, {&measured.coherent_profile, &measured.coherent}},
        {v1::INCOHERENT, {&measured.incoherent_profile, measured.incoherent ? &*measured.incoherent : nullptr}}};
    for (const auto& [model, data] : curves) {
      if (data.second == nullptr) continue;  // No incoherent model under per-layer windows.
      auto* routing = AddCurve(model, v1::THEORY_ALPHA_SOURCE_MEASURED, *data.first, *data.second)->mutable_routing();
      routing->set_depth(static_cast<uint32_t>(measured.alpha.size()));
      for (double alpha : measured.alpha) routing->mutable_alpha_schedule()->add_alpha(alpha);
    }
  }

  void AddFittedCurve(v1::ProfileModel model, uint32_t depth, double alpha, const std::vector<double>& profile,
                      const jobs::ReportMetrics& metrics) {
    auto* routing = AddCurve(model, v1::THEORY_ALPHA_SOURCE_FITTED, profile, metrics)->mutable_routing();
    routing->set_depth(depth);
    routing->set_alpha(alpha);
  }

  void AddFixedDepthFit(const jobs::FixedDepthFit& in, uint32_t depth) {
    auto* fit = out_->add_fits();
    fit->set_model(ModelToProto(in.model));
    fit->set_alpha(in.alpha);
    fit->set_lambda(in.lambda);
    // The depth is fixed at the model's: lambda is its own ridge interval.
    fit->set_lambda_low(in.lambda);
    fit->set_lambda_high(in.lambda);
    fit->set_lambda_sample_low(in.lambda_sample_low.value_or(in.lambda));
    fit->set_lambda_sample_high(in.lambda_sample_high.value_or(in.lambda));
    fit->set_rmse_log(in.metrics.rmse_log);
    auto* point = fit->add_ridge();
    point->set_depth(depth);
    point->set_alpha(in.alpha);
    point->set_rmse_log(in.metrics.rmse_log);
    AddFittedCurve(fit->model(), depth, in.alpha, in.profile, in.metrics);
  }

  void AddEffectiveDepthFit(const jobs::EffectiveDepthFit& in) {
    auto* fit = out_->add_fits();
    fit->set_model(ModelToProto(in.model));
    fit->set_alpha(in.alpha);
    fit->set_lambda(in.lambda);
    fit->set_lambda_low(in.lambda_low);
    fit->set_lambda_high(in.lambda_high);
    fit->set_lambda_sample_low(in.lambda_sample_low);
    fit->set_lambda_sample_high(in.lambda_sample_high);
    fit->set_rmse_log(in.metrics.rmse_log);
    fit->set_effective_depth(static_cast<uint32_t>(in.depth));
    for (const auto& in_point : in.ridge) {
      auto* point = fit->add_ridge();
      point->set_depth(static_cast<uint32_t>(in_point.depth));
      point->set_alpha(in_point.alpha);
      point->set_rmse_log(in_point.rmse_log);
    }
    AddFittedCurve(fit->model(), static_cast<uint32_t>(in.depth), in.alpha, in.profile, in.metrics);
  }

  const std::vector<uint32_t>& positions_;
  bool omit_profiles_;
  v1::JobTheoryComparison* out_;
};

// The value at 1-based `position` of a per-position column, or 0 where a column is short.
double At(const std::vector<double>& column, uint32_t position) {
  return position >= 1 && position <= column.size() ? column[position - 1] : 0.0;
}

void FillSamples(const v1::GetJobResultRequest& request, const jobs::JacobianReport& report,
                 const std::vector<uint32_t>& positions, v1::JacobianNormResult* result) {
  const auto samples = static_cast<uint32_t>(report.measurement.samples);
  const uint32_t first_sample = request.first_sample();
  const uint32_t sample_end =
      request.sample_count() == 0 ? samples : std::min(samples, first_sample + request.sample_count());
  if (request.include_raw_samples() && report.raw) {
    for (uint32_t sample = first_sample; sample < sample_end && sample < report.raw->size(); ++sample) {
      auto* raw = result->add_raw_samples();
      raw->set_sample(sample);
      for (uint32_t position : positions) raw->add_sq_norm(At((*report.raw)[sample], position));
    }
  }
  if (request.include_token_ids()) {
    const auto length = static_cast<uint32_t>(report.measurement.target);
    for (uint32_t sample = first_sample; sample < sample_end && sample < report.tokens.size(); ++sample) {
      const auto& ids = report.tokens[sample];
      auto* tokens = result->add_sample_tokens();
      tokens->set_sample(sample);
      for (uint32_t position : positions) {
        tokens->add_token_ids(position <= ids.size() ? static_cast<uint32_t>(ids[position - 1]) : 0);
      }
      if (ids.size() > length) tokens->set_next_token_id(static_cast<uint32_t>(ids[length]));
    }
  }
}

// Which positions one page holds: of the `selected` positions first, first + stride, ... (1-based),
// those with index [index, index + count); `token_binding` is what the next page's token binds.
struct PageSelection {
  uint32_t first = 1;
  uint32_t stride = 1;
  uint64_t index = 0;
  uint64_t count = 0;
  uint64_t selected = 0;
  std::string token_binding;
  uint64_t stop() const { return std::min<uint64_t>(selected, index + count); }
};

// The profile's statistics at `positions`, with the share of the total squared norm.
void FillStats(const jobs::JacobianReport& report, const std::vector<uint32_t>& positions, v1::JacobianNormStats* stats) {
  const std::pair<const std::vector<double>*, google::protobuf::RepeatedField<double>*> columns[] = {
      {&report.sq_norm_mean, stats->mutable_sq_norm_mean()}, {&report.sq_norm_std, stats->mutable_sq_norm_std()},
      {&report.sq_norm_stderr, stats->mutable_sq_norm_stderr()}, {&report.norm_mean, stats->mutable_norm_mean()},
      {&report.norm_std, stats->mutable_norm_std()}, {&report.norm_stderr, stats->mutable_norm_stderr()},
      {report.sq_norm_estimator_stderr ? &*report.sq_norm_estimator_stderr : nullptr, stats->mutable_estimator_stderr()}};
  double total = 0;
  for (double value : report.sq_norm_mean) total += value;
  stats->set_sq_norm_total(total);
  for (uint32_t position : positions) {
    for (const auto& [column, field] : columns) {
      if (column != nullptr) field->Add(At(*column, position));
    }
    stats->add_profile(total > 0 ? At(report.sq_norm_mean, position) / total : 0);
  }
}

// A layer sweep's profile per layer, and the per-layer branch ratios (attention weight of each
// layer, averaged over samples), on the page's positions.
void FillLayers(const v1::GetJobResultRequest& request, const jobs::JacobianReport& report,
                const std::vector<uint32_t>& positions, v1::JacobianNormResult* result) {
  if (report.layers && !request.omit_layer_profiles()) {
    for (const auto& layer : *report.layers) {
      auto* profile = result->add_layer_profiles();
      profile->set_layer(static_cast<uint32_t>(layer.layer));
      for (uint32_t position : positions) {
        profile->mutable_stats()->add_sq_norm_mean(At(layer.sq_norm_mean, position));
        profile->mutable_stats()->add_sq_norm_stderr(At(layer.sq_norm_stderr, position));
      }
    }
  }
  uint32_t layer = 0;
  for (double ratio : report.branch_ratio) {
    auto* branch = result->add_branch_ratios();
    branch->set_layer(++layer);
    branch->set_attention_mean(ratio);
  }
}

// The value and score pathways' comparison at the page's positions, and its totals.
void FillPathways(const jobs::PathwayComparison& comparison, const std::vector<uint32_t>& positions,
                  v1::JobPathwayComparison* pathways) {
  for (uint32_t position : positions) {
    pathways->add_value_sq_norm_mean(At(comparison.value_sq_norm_mean, position));
    pathways->add_value_sq_norm_stderr(At(comparison.value_sq_norm_stderr, position));
    pathways->add_ratio_mean(At(comparison.ratio_mean, position));
    pathways->add_ratio_std(At(comparison.ratio_std, position));
    pathways->add_ratio_stderr(At(comparison.ratio_stderr, position));
    if (!comparison.score_share_mean.empty()) {  // Reports written before the decomposition lack it.
      pathways->add_score_share_mean(At(comparison.score_share_mean, position));
      pathways->add_score_share_std(At(comparison.score_share_std, position));
      pathways->add_score_share_stderr(At(comparison.score_share_stderr, position));
      pathways->add_interference_share_mean(At(comparison.interference_share_mean, position));
      pathways->add_interference_share_std(At(comparison.interference_share_std, position));
      pathways->add_interference_share_stderr(At(comparison.interference_share_stderr, position));
      pathways->add_cosine_mean(At(comparison.cosine_mean, position));
      pathways->add_cosine_std(At(comparison.cosine_std, position));
      pathways->add_cosine_stderr(At(comparison.cosine_stderr, position));
    }
  }
  pathways->set_total_ratio_mean(comparison.total_ratio_mean);
  pathways->set_total_ratio_stderr(comparison.total_ratio_stderr);
  pathways->set_total_score_share_mean(comparison.total_score_share_mean);
  pathways->set_total_score_share_stderr(comparison.total_score_share_stderr);
  pathways->set_total_interference_share_mean(comparison.total_interference_share_mean);
  pathways->set_total_interference_share_stderr(comparison.total_interference_share_stderr);
}

// Comparison jobs: every model's shares and paired ratios (over all positions and over the
// context alone), its profile at the page's positions and its spikes at text inputs' document
// starts.
void FillComparison(const std::vector<jobs::ComparedModel>& comparison, const std::vector<uint32_t>& positions,
                    v1::JacobianNormResult* result) {
  auto share = [](const jobs::ShareEstimate& in, v1::ShareEstimate* out) {
    out->set_mean(in.mean), out->set_std(in.std), out->set_stderr(in.stderr);
  };
  auto ratio = [](const std::optional<jobs::PairedLogRatio>& in, v1::PairedLogRatio* out) {
    out->set_mean(in->mean), out->set_std(in->std), out->set_stderr(in->stderr);
    out->set_low(in->low), out->set_high(in->high), out->set_samples(static_cast<uint32_t>(in->samples));
  };
  // v1::ComparedModel and v1::ContextBands name the statistics alike.
  auto bands = [&](const jobs::BandStatistics& in, auto* out) {
    share(in.leading, out->mutable_leading());
    share(in.middle, out->mutable_middle());
    share(in.trailing, out->mutable_trailing());
    share(in.first, out->mutable_first());
    share(in.last, out->mutable_last());
    if (in.middle_log_ratio) ratio(in.middle_log_ratio, out->mutable_middle_log_ratio());
    if (in.first_log_ratio) ratio(in.first_log_ratio, out->mutable_first_log_ratio());
    if (in.last_log_ratio) ratio(in.last_log_ratio, out->mutable_last_log_ratio());
    out->set_spearman(in.spearman);
  };
  for (const auto& compared : comparison) {
    auto* out = result->add_comparison();
    out->set_model(compared.model);
    out->set_model_uid(compared.uid);
    out->set_weights_sha256(compared.weights_sha256);
    for (uint32_t position : positions) {
      out->add_sq_norm_mean(At(compared.sq_norm_mean, position));
      out->add_sq_norm_stderr(At(compared.sq_norm_stderr, position));
    }
    bands(compared.bands, out);
    for (const auto& measured : compared.boundary_spikes.value_or(std::vector<jobs::BoundarySpike>{})) {
      SpikeToProto(measured, out->add_boundary_spikes());
    }
    if (compared.context) bands(*compared.context, out->mutable_context());
    if (compared.recall) RecallToProto(*compared.recall, out->mutable_recall());
  }
}

// One page: the header fields, the positions and every per-position array, and the token of the
// next page when positions remain.
absl::Status FillPage(const v1::GetJobResultRequest& request, const jobs::JacobianReport& report,
                      const PageSelection& page, v1::GetJobResultResponse* response) {
  response->Clear();
  response->set_id(request.id());
  auto* result = response->mutable_jacobian_norm();
  const auto& measurement = report.measurement;
  result->set_sequence_length(static_cast<uint32_t>(measurement.length));
  result->set_target_position(static_cast<uint32_t>(measurement.target));
  result->set_samples(static_cast<uint32_t>(measurement.samples));
  result->set_num_layers(static_cast<uint32_t>(report.model.layers));
  std::vector<uint32_t> positions;
  for (uint64_t i = page.index; i < page.stop(); ++i) positions.push_back(page.first + static_cast<uint32_t>(i) * page.stride);
  result->mutable_positions()->Add(positions.begin(), positions.end());
  FillStats(report, positions, result->mutable_profile()->mutable_stats());
  if (measurement.target >= 3) {
    TheoryPage(positions, request.omit_theory(), result->mutable_profile()->mutable_theory()).Fill(report.theory);
  }
  FillLayers(request, report, positions, result);
  if (request.include_raw_samples() && !report.raw) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           "the job was submitted without return_raw_samples: no per-sample values were kept");
  }
  if (report.pathways) FillPathways(*report.pathways, positions, result->mutable_pathways());
  if (report.comparison) FillComparison(*report.comparison, positions, result);
  FillSamples(request, report, positions, result);
  if (page.stop() < page.selected) {
    response->set_next_page_token(paging::IssuePageToken("GetJobResult", page.token_binding, std::to_string(page.stop())));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FillResultPage(const v1::GetJobResultRequest& request, const jobs::JacobianReport& report,
                            v1::GetJobResultResponse* response, size_t reserved_bytes) {
  const auto length = static_cast<uint32_t>(report.measurement.target);
  const uint32_t first = request.has_first_position() ? request.first_position() : 1;
  const uint32_t last = request.has_last_position() ? request.last_position() : length;
  if (first < 1 || last > length || first > last) {
    return InvalidArgumentError({ErrorReason::kInvalidPosition, "first_position..last_position",
                                 absl::StrCat(first, "..", last), absl::StrCat("1 <= first <= last <= T = ", length)});
  }
  const uint32_t stride = std::max(1u, request.stride());
  const uint32_t page_size = request.page_size() == 0 ? 1024 : std::min(request.page_size(), 16384u);
  // The token is bound to everything that selects the page's values, page_size excluded.
  const std::string selection =
      absl::StrCat(request.id(), "|", first, "..", last, "/", stride, "|", request.omit_theory(), request.omit_layer_profiles(),
                   request.include_raw_samples(), request.include_token_ids(), "|", request.first_sample(), "+",
                   request.sample_count());
  auto cursor = paging::RedeemPageToken(request.page_token(), "GetJobResult", selection);
  if (!cursor.ok()) return cursor.status();
  uint64_t index = 0;  // Index of the first selected position of this page.
  if (!cursor->empty() && !absl::SimpleAtoi(*cursor, &index)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "page_token", request.page_token().substr(0, 64),
                                 "a token from the previous page"});
  }
  const uint64_t selected = (last - first) / stride + 1;
  // A page fits the result-page limit (any gRPC client's default receive size): fewer positions
  // when it would not, down to one; a single position that does not fit is refused.
  const auto budget = limits::Default<size_t>(limits::Limit::kMaxResultPageBytes);
  PageSelection page{first, stride, index, 0, selected, selection};
  page.count = std::max<uint64_t>(1, std::min<uint64_t>(page_size, selected - std::min(index, selected)));
  while (true) {
    if (auto status = FillPage(request, report, page, response); !status.ok()) return status;
    const size_t bytes = response->ByteSizeLong();
    if (bytes + reserved_bytes <= budget) return absl::OkStatus();
    if (page.count == 1 && bytes <= budget) return absl::OkStatus();  // The report alone passes the limit.
    if (page.count == 1) {
      response->Clear();
      return TooLargeError("one position of the result page", absl::StrCat(bytes, " bytes"),
                           absl::StrCat(limits::Allowed(limits::Limit::kMaxResultPageBytes),
                                        "; ask for fewer samples (first_sample, sample_count) or leave out raw samples"));
    }
    // Shrink in proportion, with a margin, and at least by half.
    const double room = budget > reserved_bytes ? static_cast<double>(budget - reserved_bytes) : 0.0;
    page.count = std::max<uint64_t>(
        1, std::min<uint64_t>(page.count / 2, static_cast<uint64_t>(0.9 * static_cast<double>(page.count) * room / static_cast<double>(bytes))));
  }
}

}  // namespace posbias::api
