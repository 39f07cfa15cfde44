#include "client/cli/job_result_output.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/output.h"
#include "client/cli/recall_output.h"
#include "client/cli/svg_plot.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

std::vector<double> Doubles(const google::protobuf::RepeatedField<double>& values) {
  return {values.begin(), values.end()};
}

std::string ModelName(v1::ProfileModel model) { return LowerEnum(v1::ProfileModel_Name(model), ""); }

// The theory curve of `model` with fitted alpha, or nullptr.
const v1::JobTheoryCurve* FittedCurve(const v1::JacobianNormResult& result, v1::ProfileModel model) {
  for (const auto& curve : result.profile().theory().curves()) {
    if (curve.model() == model && curve.alpha_source() == v1::THEORY_ALPHA_SOURCE_FITTED) return &curve;
  }
  return nullptr;
}

// One line of the comparison table: a model's shares and its paired ratio against the reference.
template <typename Bands>
void PrintBands(const CliContext& context, const std::string& label, const Bands& m) {
  std::string ratio = "(reference)";
  if (m.has_middle_log_ratio()) {
    ratio = absl::StrFormat("%+.4f +- %.4f [%+.4f, %+.4f]", m.middle_log_ratio().mean(), m.middle_log_ratio().stderr(),
                            m.middle_log_ratio().low(), m.middle_log_ratio().high());
  }
  context.out << absl::StrFormat("%-24s %.4f +- %-10.4f %.4f +- %-10.4f %.4f +- %-10.4f %-34s %8.4f\n", label,
                                 m.middle().mean(), m.middle().stderr(), m.first().mean(), m.first().stderr(),
                                 m.last().mean(), m.last().stderr(), ratio, m.spearman());
}

// A needle sweep: the needle span's share against depth, with its standard-error band, beside the
// same positions' share with the filler alone; written next to the profile plot as
// <plot>-needle.svg.
int PlotNeedleSweep(const CliContext& context, const std::string& measured, const v1::JacobianNormResult& result) {
  if (result.needle_sweep_size() == 0) return 0;
  PlotSeries share{.label = "needle span's share", .x = {}, .y = {}, .markers = true};
  PlotSeries high{.label = "share +- standard error", .x = {}, .y = {}, .markers = false, .dashed = true, .line = true,
                  .color = 7};
  PlotSeries low = high;
  low.label = "";
  PlotSeries alone{.label = "same positions, filler alone", .x = {}, .y = {}, .markers = true, .dashed = true};
  for (const auto& d : result.needle_sweep()) {
    for (PlotSeries* series : {&share, &high, &low, &alone}) series->x.push_back(d.depth());
    share.y.push_back(d.share_mean());
    high.y.push_back(d.share_mean() + d.share_stderr());
    low.y.push_back(d.share_mean() - d.share_stderr());
    alone.y.push_back(d.baseline_share_mean());
  }
  std::string path = context.plot;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".svg") == 0) path.resize(path.size() - 4);
  path += "-needle.svg";
  std::string error;
  const std::string svg = RenderSvgPlot({share, high, low, alone},
                                        {.title = "needle sweep of " + measured,
                                         .x_label = "needle depth",
                                         .y_label = "share of sum_j ||J_j||^2",
                                         .log_y = false},
                                        &error);
  std::ofstream(path) << svg;
  if (svg.empty()) return context.UsageError("cannot draw the needle plot: " + error);
  context.err << "needle plot written to " << path << "\n";
  return 0;
}

// A path beside --plot: <plot>-<suffix>.svg.
std::string PlotPathBeside(const std::string& plot, const std::string& suffix) {
  std::string path = plot;
  if (path.size() > 4 && path.compare(path.size() - 4, 4, ".svg") == 0) path.resize(path.size() - 4);
  return path + "-" + suffix + ".svg";
}

// A comparison job: every model's profile, normalized to sum 1 over the positions, with its
// standard-error band, overlaid (<plot>-comparison.svg); and each model's middle share with its
// standard error against its place in the job (<plot>-middle.svg: a training trajectory's
// checkpoints in order).
int PlotComparison(const CliContext& context, const v1::JacobianNormResult& result) {
  if (result.comparison_size() == 0) return 0;
  const std::vector<double> positions(result.positions().begin(), result.positions().end());
  std::vector<PlotSeries> profiles;
  PlotSeries middle{.label = "middle 80 % share", .x = {}, .y = {}, .markers = true};
  PlotSeries high{.label = "+- standard error", .x = {}, .y = {}, .markers = false, .dashed = true, .line = true, .color = 7};
  PlotSeries low = high;
  low.label = "";
  for (int m = 0; m < result.comparison_size(); ++m) {
    const auto& compared = result.comparison(m);
    double total = 0;
    for (double v : compared.sq_norm_mean()) total += v;
    PlotSeries profile{.label = compared.model(), .x = positions, .y = Doubles(compared.sq_norm_mean()), .markers = false};
    PlotSeries band{.label = "", .x = positions, .y = {}, .markers = false, .dashed = true, .line = true, .color = m};
    PlotSeries band_low = band;
    profile.color = m;
    for (size_t j = 0; j < profile.y.size() && total > 0; ++j) {
      const double se = j < static_cast<size_t>(compared.sq_norm_stderr_size()) ? compared.sq_norm_stderr(static_cast<int>(j)) : 0;
      band.y.push_back((profile.y[j] + se) / total);
      band_low.y.push_back((profile.y[j] - se) / total);
      profile.y[j] /= total;
    }
    profiles.push_back(std::move(profile));
    profiles.push_back(std::move(band));
    profiles.push_back(std::move(band_low));
    for (PlotSeries* series : {&middle, &high, &low}) series->x.push_back(m);
    middle.y.push_back(compared.middle().mean());
    high.y.push_back(compared.middle().mean() + compared.middle().stderr());
    low.y.push_back(compared.middle().mean() - compared.middle().stderr());
  }
  std::vector<std::string> names;
  for (const auto& compared : result.comparison()) names.push_back(compared.model());
  const std::string against = absl::StrJoin(std::vector<std::string>(names.begin() + 1, names.end()), ", ");
  std::string error;
  const std::string overlay =
      RenderSvgPlot(profiles, {.title = "position profiles: " + names[0] + " against " + against, .x_label = "position j",
                               .y_label = "share of sum_j ||J_j||^2 (+- standard error)"}, &error);
  const std::string trajectory =
      RenderSvgPlot({middle, high, low}, {.title = "middle 80 % share by model (reference " + names[0] + ")",
                                          .x_label = "model, in the job's order", .y_label = "middle 80 % share of sum_j ||J_j||^2",
                                          .log_y = false, .x_categories = names}, &error);
  if (overlay.empty() || trajectory.empty()) return context.UsageError("cannot draw the comparison plots: " + error);
  std::ofstream(PlotPathBeside(context.plot, "comparison")) << overlay;
  std::ofstream(PlotPathBeside(context.plot, "middle")) << trajectory;
  context.err << "comparison plots written to " << PlotPathBeside(context.plot, "comparison") << " and "
              << PlotPathBeside(context.plot, "middle") << "\n";
  return 0;
}

}  // namespace

// The whole typed result: every page of GetJobResult joined (positions, the measured statistics
// and the theory curves' profiles); the first page's other members as they came.
absl::StatusOr<v1::GetJobResultResponse> WholeResult(const CliContext& context, const std::string& id) {
  v1::GetJobResultRequest request;
  request.set_id(id);
  request.set_omit_layer_profiles(true);
  auto first = context.client.GetJobResult(request);
  if (!first.ok()) return first.status();
  v1::GetJobResultResponse whole = *std::move(first);
  auto* result = whole.mutable_jacobian_norm();
  std::string token = whole.next_page_token();
  while (!token.empty()) {
    request.set_page_token(token);
    auto page = context.client.GetJobResult(request);
    if (!page.ok()) return page.status();
    const auto& more = page->jacobian_norm();
    result->mutable_positions()->MergeFrom(more.positions());
    auto* stats = result->mutable_profile()->mutable_stats();
    stats->mutable_sq_norm_mean()->MergeFrom(more.profile().stats().sq_norm_mean());
    stats->mutable_sq_norm_stderr()->MergeFrom(more.profile().stats().sq_norm_stderr());
    for (int m = 0; m < result->comparison_size() && m < more.comparison_size(); ++m) {
      result->mutable_comparison(m)->mutable_sq_norm_mean()->MergeFrom(more.comparison(m).sq_norm_mean());
      result->mutable_comparison(m)->mutable_sq_norm_stderr()->MergeFrom(more.comparison(m).sq_norm_stderr());
    }
    auto* curves = result->mutable_profile()->mutable_theory()->mutable_curves();
    for (int c = 0; c < curves->size() && c < more.profile().theory().curves_size(); ++c) {
      curves->Mutable(c)->mutable_profile()->MergeFrom(more.profile().theory().curves(c).profile());
    }
    token = page->next_page_token();
  }
  return whole;
}

// The measured means and standard errors, with each theory fit's alpha and metrics as extras.
void PrintResultTable(const CliContext& context, const v1::JacobianNormResult& result) {
  const auto& stats = result.profile().stats();
  Table table;
  table.columns = {{"position", std::vector<double>(result.positions().begin(), result.positions().end()), true},
                   {"sq_norm_mean", Doubles(stats.sq_norm_mean())},
                   {"sq_norm_stderr", Doubles(stats.sq_norm_stderr())}};
  for (const auto& fit : result.profile().theory().fits()) {
    if (fit.has_error()) continue;
    const std::string model = ModelName(fit.model());
    table.extras[model + "_alpha"] = fit.alpha();
    table.extras[model + "_rmse_log"] = fit.rmse_log();
    if (const auto* curve = FittedCurve(result, fit.model())) table.extras[model + "_spearman"] = curve->metrics().spearman();
  }
  PrintResult(table, context.format, context.out);
}

// A comparison job: one line per model, its shares and its paired ratios against the first; then
// the same over the context alone (positions 1..T-1, the target's own left out).
void PrintComparison(const CliContext& context, const v1::JacobianNormResult& result) {
  if (result.comparison_size() == 0) return;
  const auto header = [&](const char* title) {
    context.out << title << "\n"
                << absl::StrFormat("%-24s %-20s %-20s %-20s %-34s %8s\n", "model", "middle share (+- se)",
                                   "first weight (+- se)", "last weight (+- se)", "log middle / reference's [95 %]",
                                   "spearman");
  };
  header("all positions 1..T:");
  for (const auto& m : result.comparison()) PrintBands(context, m.model(), m);
  if (result.comparison(0).has_context()) {
    header("the context alone, positions 1..T-1 (last weight: position T-1):");
    for (const auto& m : result.comparison()) {
      if (m.has_context()) PrintBands(context, m.model(), m.context());
    }
  }
  // Text inputs: every model's spikes at the document starts, named.
  for (const auto& m : result.comparison()) {
    if (m.boundary_spikes_size() == 0) continue;
    context.out << "boundary spikes of " << m.model() << ":";
    for (const auto& spike : m.boundary_spikes()) {
      context.out << " at " << spike.position() << " " << absl::StrFormat("%.3g", spike.ratio());
      if (spike.has_ratio_mean()) context.out << absl::StrFormat(" (per sample %.3g +- %.2g)", spike.ratio_mean(), spike.ratio_stderr());
      context.out << ";";
    }
    context.out << "\n";
  }
}

// What a plot's title names: the model measured (the report's `model.weights`), then the job.
std::string Measured(const v1::GetJobResultResponse& whole) {
  const auto report = nlohmann::json::parse(whole.report_json(), nullptr, false);
  std::string model;
  if (report.is_object() && report.contains("model") && report["model"].is_object() &&
      report["model"].contains("weights") && report["model"]["weights"].is_string()) {
    model = report["model"]["weights"].get<std::string>();
  }
  return model.empty() ? "job " + whole.id() : model + " (job " + whole.id() + ")";
}

// Draws the measured means, their standard-error band and the fitted theory curves (on the
// measured scale: the same total as the measured means) to --plot.
int PlotResult(const CliContext& context, const std::string& measured, const v1::JacobianNormResult& result) {
  const std::vector<double> positions(result.positions().begin(), result.positions().end());
  const auto& stats = result.profile().stats();
  const std::vector<double> mean = Doubles(stats.sq_norm_mean());
  std::vector<PlotSeries> series = {
      {.label = "measured ||dy/de_j||^2", .x = positions, .y = mean, .markers = true}};
  const std::vector<double> stderr_of_mean = Doubles(stats.sq_norm_stderr());
  if (stderr_of_mean.size() == mean.size()) {  // The band, drawn as its two edges (mean +- stderr).
    PlotSeries upper{.label = "measured +- standard error", .x = positions, .y = mean, .markers = false, .dashed = true,
                     .line = true, .color = 7};
    PlotSeries lower = upper;
    lower.label = "";  // One band, one legend entry.
    for (size_t j = 0; j < mean.size(); ++j) {
      upper.y[j] = mean[j] + stderr_of_mean[j];
      lower.y[j] = mean[j] - stderr_of_mean[j];  // <= 0 is not drawn on the log axis.
    }
    series.push_back(std::move(upper));
    series.push_back(std::move(lower));
  }
  for (const auto& curve : result.profile().theory().curves()) {
    if (curve.alpha_source() != v1::THEORY_ALPHA_SOURCE_FITTED || curve.profile_size() != result.positions_size()) continue;
    std::vector<double> y = Doubles(curve.profile());
    for (double& v : y) v *= stats.sq_norm_total();
    char label[96];
    std::snprintf(label, sizeof(label), "%s, H %u, alpha %.3f", ModelName(curve.model()).c_str(),
                  curve.routing().depth(), curve.routing().alpha());
    series.push_back(PlotSeries{.label = label, .x = positions, .y = y, .dashed = true});
  }
  // Text inputs: the positions where samples have a document (or its needle) begin.
  PlotSeries starts{.label = "document starts", .x = {}, .y = {}, .markers = true, .dashed = false, .line = false};
  for (const auto& spike : result.boundary_spikes()) {
    if (spike.position() < 1 || spike.position() > mean.size()) continue;
    starts.x.push_back(static_cast<double>(spike.position()));
    starts.y.push_back(mean[spike.position() - 1]);
  }
  if (!starts.x.empty()) series.push_back(std::move(starts));
  std::string error;
  const std::string svg = RenderSvgPlot(series,
                                        {.title = "position profile of " + measured,
                                         .x_label = "position j",
                                         .y_label = "squared Jacobian norm at j, mean over samples"},
                                        &error);
  std::ofstream(context.plot) << svg;
  if (svg.empty()) return context.UsageError("cannot draw the plot: " + error);
  context.err << "plot written to " << context.plot << "\n";
  if (int code = PlotComparison(context, result); code != 0) return code;
  if (const std::string failed = PlotRecall(context.plot, measured, result, context.err); !failed.empty()) {
    return context.UsageError(failed);
  }
  return PlotNeedleSweep(context, measured, result);
}

}  // namespace posbias::cli
