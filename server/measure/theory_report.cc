#include "server/measure/theory_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/density/comparison.h"
#include "server/density/discrete.h"
#include "server/density/fit.h"
#include "server/density/summary.h"

namespace posbias::measure {
namespace {

jobs::TheoryModel TheoryModelOf(density::Model model) {
  return model == density::Model::kCoherent ? jobs::TheoryModel::kCoherent : jobs::TheoryModel::kIncoherent;
}

jobs::ReportModel ConfigReport(models::DecoderModel& model, const std::string& weights) {
  const auto& c = model.config();
  jobs::ReportModel out;
  out.family = models::FamilyName(c.family);
  out.preset = c.preset;
  out.layers = c.num_layers;
  out.width = c.hidden_size;
  out.heads = c.num_heads;
  out.kv_heads = c.num_kv_heads;
  out.mlp_width = c.intermediate_size;
  out.vocab = c.vocab_size;
  out.max_positions = c.max_positions;
  out.norm_eps = c.norm_eps;
  out.rope_theta = c.rope_theta;
  out.tie_embeddings = c.tie_embeddings;
  out.cesaro_alpha = c.cesaro_alpha;
  if (c.sliding_window > 0) out.sliding_window = c.sliding_window;
  out.no_position_encoding = c.ablations.no_position_encoding;
  out.uniform_attention = c.ablations.uniform_attention;
  out.no_mlp = c.ablations.no_mlp;
  out.parameters = models::ParameterCount(model);
  out.weights = weights.empty() ? "seeded initialization" : weights;
  out.init_recipe = weights.empty() ? model.init_recipe() : "loaded from " + weights;
  return out;
}

// Profile of positions 1..t (later positions cannot influence position t).
std::vector<double> Prefix(const std::vector<double>& values, int64_t target) {
  return {values.begin(), values.begin() + target};
}

// The sampling interval of each model's fitted lambda: a 95 % percentile bootstrap over samples
// (kResamples resamples of the S per-sample profiles with replacement, alpha refitted at the
// fixed depth; a fixed seed, so the report is reproducible). {lambda, lambda} when S = 1.
constexpr int kResamples = 200;

// The fits' options for the model's windows: the pattern (empty: full causal attention), and the
// coherent model alone where the windows differ between layers.
density::FitOptions FitOptionsFor(const std::vector<uint32_t>& windows) {
  density::FitOptions options;
  options.layer_windows = windows;
  if (density::WindowsDiffer(windows)) options.models = {density::Model::kCoherent};
  return options;
}

std::map<density::Model, std::pair<double, double>> BootstrapLambda(
    int64_t depth, const std::vector<std::vector<double>>& samples, int64_t target, const std::vector<uint32_t>& windows) {
  std::map<density::Model, std::vector<double>> lambdas;
  std::mt19937_64 generator(20260329);
  std::uniform_int_distribution<size_t> pick(0, samples.size() - 1);
  density::FitOptions options = FitOptionsFor(windows);
  options.min_depth = options.max_depth = static_cast<uint32_t>(depth);
  for (int r = 0; r < kResamples; ++r) {
    std::vector<double> mean(target, 0.0);
    for (size_t i = 0; i < samples.size(); ++i) {
      const auto& sample = samples[pick(generator)];
      for (int64_t j = 0; j < target; ++j) mean[j] += sample[j] / static_cast<double>(samples.size());
    }
    auto fits = density::FitProfile(mean, options);
    if (!fits.ok()) continue;  // A resample with a zero position: left out.
    for (const auto& fit : *fits) lambdas[fit.model].push_back(fit.lambda);
  }
  std::map<density::Model, std::pair<double, double>> intervals;
  for (auto& [model, values] : lambdas) {
    std::sort(values.begin(), values.end());
    auto at = [&](double q) { return values[static_cast<size_t>(std::lround(q * static_cast<double>(values.size() - 1)))]; };
    intervals[model] = {at(0.025), at(0.975)};
  }
  return intervals;
}

// `depth` is the model's layer count, 0 when unknown (TorchScript): the fixed-depth fits then use
// depth 1 and the effective-depth ridge spans all depths 1..64. `windows`: the model's attention
// window per layer (empty: full causal), repeated over the layers of every depth a fit tries.
// The fits at the model's depth, one per model, with bootstrap intervals over samples.
absl::Status AddFixedDepthFits(int64_t depth, const std::vector<double>& measured,
                               const std::vector<std::vector<double>>& samples, const std::vector<uint32_t>& windows,
                               jobs::TheoryComparison& theory) {
  density::FitOptions options = FitOptionsFor(windows);
  options.min_depth = options.max_depth = static_cast<uint32_t>(depth);
  options.include_profiles = true;
  auto fits = density::FitProfile(measured, options);
  if (!fits.ok()) return fits.status();
  const auto intervals = samples.size() > 1 ? BootstrapLambda(depth, samples, static_cast<int64_t>(measured.size()), windows)
                                            : std::map<density::Model, std::pair<double, double>>{};
  theory.fits.emplace();
  for (const auto& fit : *fits) {
    const auto interval = intervals.count(fit.model) ? intervals.at(fit.model) : std::pair{fit.lambda, fit.lambda};
    // `profile`: the fitted theory on the measured positions 1..t, normalized to sum 1 (compare
    // with sq_norm_mean / its sum). `lambda_sample_low/high`: the bootstrap interval over samples.
    jobs::FixedDepthFit out;
    out.model = TheoryModelOf(fit.model);
    out.alpha = fit.alpha;
    out.lambda = fit.lambda;
    out.lambda_sample_low = interval.first;
    out.lambda_sample_high = interval.second;
    out.bootstrap_resamples = samples.size() > 1 ? kResamples : 0;
    out.metrics = fit.metrics;
    out.profile = fit.profile;
    theory.fits->push_back(std::move(out));
  }
  return absl::OkStatus();
}

// The effective depth (THEORY.md section 8): real profiles pin lambda = alpha H far better than H
// and alpha apart, so the ridge over depths 1..max_depth is reported with its interval. A failure's
// message says which part failed (skipped for its size, or the fit's own refusal).
absl::Status AddEffectiveDepthFits(uint32_t max_depth, const std::vector<double>& measured,
                                   const std::vector<std::vector<double>>& samples, const std::vector<uint32_t>& windows,
                                   jobs::TheoryComparison& theory) {
  if (uint64_t{max_depth} * measured.size() > density::kMaxFitWork) {
    return absl::ResourceExhaustedError(absl::StrCat("the effective-depth ridge was skipped: ", max_depth, " depths x ",
                                                     measured.size(), " positions exceed the fits' work limit of ",
                                                     density::kMaxFitWork));
  }
  density::FitOptions ridge = FitOptionsFor(windows);
  ridge.include_profiles = true;
  ridge.min_depth = 1;
  ridge.max_depth = max_depth;
  auto ridge_fits = density::FitProfile(measured, ridge);
  if (!ridge_fits.ok()) {
    return absl::Status(ridge_fits.status().code(), absl::StrCat("the effective-depth fits over depths 1..", max_depth,
                                                                 " failed: ", ridge_fits.status().message()));
  }
  theory.effective_depth_fits.emplace();
  for (const auto& fit : *ridge_fits) {
    jobs::EffectiveDepthFit out;
    for (const auto& point : fit.ridge) out.ridge.push_back({point.depth, point.alpha, point.rmse_log});
    // The sampling interval with alpha refitted at this fit's depth.
    auto interval = std::pair{fit.lambda, fit.lambda};
    if (samples.size() > 1) {
      const auto intervals = BootstrapLambda(fit.depth, samples, static_cast<int64_t>(measured.size()), windows);
      if (intervals.count(fit.model)) interval = intervals.at(fit.model);
    }
    out.model = TheoryModelOf(fit.model);
    out.depth = fit.depth;
    out.alpha = fit.alpha;
    out.lambda = fit.lambda;
    out.lambda_low = fit.lambda_low;
    out.lambda_high = fit.lambda_high;
    out.lambda_sample_low = interval.first;
    out.lambda_sample_high = interval.second;
    out.metrics = fit.metrics;
    out.profile = fit.profile;
    theory.effective_depth_fits->push_back(std::move(out));
  }
  return absl::OkStatus();
}

// The theory under the measured per-layer branch ratios (no fit: the schedule is the model's).
absl::Status AddMeasuredAlphaTheory(const std::vector<double>& measured, const std::vector<double>& branch_ratio,
                                    const std::vector<uint32_t>& windows, jobs::TheoryComparison& theory) {
  auto routing = density::MakeScheduledRouting(0, branch_ratio);
  if (routing.ok() && !windows.empty()) routing = density::WithAttentionWindows(*routing, 0, windows);
  if (!routing.ok()) return routing.status();
  // Windows that differ between layers: the coherent model only (the incoherent one is a sum over
  // the 2^H subsets of layers).
  density::DiscreteOptions options;
  options.incoherent = !density::WindowsDiffer(windows);
  auto profiles = density::ComputeDiscreteProfiles(*routing, measured.size(), options);
  if (!profiles.ok()) return profiles.status();
  std::vector<double> coherent_sq(profiles->coherent.size());
  std::transform(profiles->coherent.begin(), profiles->coherent.end(), coherent_sq.begin(),
                 [](double v) { return v * v; });
  jobs::MeasuredAlphaTheory out;
  out.alpha = branch_ratio;
  out.coherent = density::CompareProfiles(measured, coherent_sq);
  out.coherent_profile = density::Normalized(coherent_sq);
  if (options.incoherent) {
    out.incoherent = density::CompareProfiles(measured, profiles->incoherent);
    out.incoherent_profile = density::Normalized(profiles->incoherent);
  }
  theory.measured_alpha_schedule = std::move(out);
  return absl::OkStatus();
}

}  // namespace

jobs::TheoryComparison CompareWithTheory(int64_t depth, const std::vector<double>& measured,
                                         const std::vector<double>& branch_ratio,
                                         const std::vector<std::vector<double>>& samples,
                                         const std::vector<uint32_t>& layer_windows) {
  // The windows as the fits take them: none when every layer is full causal.
  const bool windowed = std::any_of(layer_windows.begin(), layer_windows.end(), [](uint32_t w) { return w > 0; });
  const std::vector<uint32_t> windows = windowed ? layer_windows : std::vector<uint32_t>{};
  const bool mixed = density::WindowsDiffer(windows);
  const bool unknown_depth = depth == 0;
  depth = std::max<int64_t>(depth, 1);
  jobs::TheoryComparison theory;
  theory.depth = depth;
  if (measured.size() < 3 || !density::CheckProfileValues(measured, "sq_norm_mean").ok() ||
      depth > static_cast<int64_t>(density::kMaxFitDepth)) {
    theory.note = "no fit: the profile needs at least 3 finite, non-negative values";
    return theory;
  }
  // Each part that fails says which it was and why; the others are still reported.
  std::vector<std::string> failed;
  if (mixed) {
    failed.push_back(absl::StrCat("the model's layers have different windows (", absl::StrJoin(windows, ", "),
                                  "): every part is the coherent model's, the layers' product in order (the "
                                  "incoherent one would sum over the 2^H subsets of layers)"));
  }
  if (auto status = AddFixedDepthFits(depth, measured, samples, windows, theory); !status.ok()) {
    failed.push_back(absl::StrCat("the fits at depth ", depth, " failed: ", status.message()));
  }
  const auto max_depth = static_cast<uint32_t>(unknown_depth ? density::kMaxFitDepthCount
                                                             : std::min<int64_t>(4 * depth, density::kMaxFitDepthCount));
  if (auto status = AddEffectiveDepthFits(max_depth, measured, samples, windows, theory); !status.ok()) {
    failed.emplace_back(status.message());
  }
  if (!branch_ratio.empty()) {
    const std::vector<uint32_t> schedule_windows = branch_ratio.size() == windows.size() ? windows : std::vector<uint32_t>{};
    if (auto status = AddMeasuredAlphaTheory(measured, branch_ratio, schedule_windows, theory); !status.ok()) {
      failed.push_back(absl::StrCat("the theory under the measured branch ratios failed: ", status.message()));
    }
  }
  if (!failed.empty()) theory.note = absl::StrJoin(failed, "; ");
  return theory;
}

jobs::TheoryComparison LossGradientTheory(int64_t depth) {
  jobs::TheoryComparison theory;
  theory.depth = depth;
  theory.note =
      "no fit: the loss gradient sums every position's loss, g_j = sum_{t>=j} J_{t,j}^T dl_t/dh_t, so the "
      "routing model's counterpart is sum_{t>=j} (N^H)_{t,j}^2 (uncorrelated per-position loss gradients of "
      "equal size), not row L of N^H that the fits describe";
  return theory;
}

namespace {

// Each layer's attention window (empty: full causal attention everywhere).
std::vector<uint32_t> WindowsOf(const models::ModelConfig& config) {
  std::vector<uint32_t> windows;
  if (config.sliding_window <= 0) return windows;
  for (int64_t l = 0; l < config.num_layers; ++l) windows.push_back(static_cast<uint32_t>(config.WindowOf(l)));
  return windows;
}

}  // namespace

jobs::JacobianReport BuildReport(models::DecoderModel& model, const jacobian::MeasureOptions& options,
                                 const jacobian::MeasureResult& result, const std::string& weights) {
  jobs::JacobianReport report;
  report.model = ConfigReport(model, weights);
  const bool gaussian = options.input == jacobian::InputKind::kGaussianEmbeddings;
  auto& m = report.measurement;
  m.length = result.length;
  m.target = result.target;
  m.samples = options.samples;
  m.method = options.method;
  m.probes = options.method == jacobian::Method::kHutchinson ? options.probes : 0;
  if (options.method == jacobian::Method::kHutchinson) m.probe_distribution = options.probe_distribution;
  m.output = options.output;
  m.seed = options.seed;
  m.input = options.input;
  m.embedding = gaussian ? "gaussian e_j" : (model.embeds_positions() ? "token + learned position embedding" : "token embedding");
  m.dtype = result.dtype_name;
  m.device = result.device_name;
  m.torch_version = result.torch_version;
  m.seconds = result.seconds;
  m.vjp_count = result.vjp_count;
  m.cotangent_batch = result.cotangent_batch;
  m.checkpointed = result.checkpointed;
  m.reverse_pass = result.reverse_pass;
  m.pathway = options.pathway;
  report.tokens = result.tokens;
  report.positions.resize(result.length);
  std::iota(report.positions.begin(), report.positions.end(), 1);
  const auto& final_stats = result.sq_norm.back();
  report.sq_norm_mean = final_stats.mean;
  report.sq_norm_std = final_stats.std;
  report.sq_norm_stderr = final_stats.stderr_mean;
  report.norm_mean = result.norm.back().mean;
  report.norm_std = result.norm.back().std;
  report.norm_stderr = result.norm.back().stderr_mean;
  if (!result.estimator_stderr.empty()) report.sq_norm_estimator_stderr = result.estimator_stderr.back();
  if (options.output == jacobian::Output::kLayerSweep) {
    report.layers.emplace();
    for (size_t l = 0; l < result.sq_norm.size(); ++l) {
      report.layers->push_back({static_cast<int64_t>(l + 1), result.sq_norm[l].mean, result.sq_norm[l].stderr_mean});
    }
  }
  if (options.compare_pathways && !result.pathway_ratio.empty()) {
    const auto& value = result.value_sq_norm.back();
    const auto& ratio = result.pathway_ratio.back();
    const auto& total = result.pathway_total_ratio.back();
    auto& p = report.pathways.emplace();
    p.value_sq_norm_mean = value.mean, p.value_sq_norm_std = value.std, p.value_sq_norm_stderr = value.stderr_mean;
    p.ratio_mean = ratio.mean, p.ratio_std = ratio.std, p.ratio_stderr = ratio.stderr_mean;
    p.total_ratio_mean = total.mean, p.total_ratio_std = total.std, p.total_ratio_stderr = total.stderr_mean;
    const auto& score = result.pathway_score_share.back();
    const auto& interference = result.pathway_interference_share.back();
    const auto& cosine = result.pathway_cosine.back();
    p.score_share_mean = score.mean, p.score_share_std = score.std, p.score_share_stderr = score.stderr_mean;
    p.interference_share_mean = interference.mean, p.interference_share_std = interference.std;
    p.interference_share_stderr = interference.stderr_mean;
    p.cosine_mean = cosine.mean, p.cosine_std = cosine.std, p.cosine_stderr = cosine.stderr_mean;
    const auto& total_score = result.pathway_total_score_share.back();
    const auto& total_interference = result.pathway_total_interference_share.back();
    p.total_score_share_mean = total_score.mean, p.total_score_share_std = total_score.std;
    p.total_score_share_stderr = total_score.stderr_mean;
    p.total_interference_share_mean = total_interference.mean, p.total_interference_share_std = total_interference.std;
    p.total_interference_share_stderr = total_interference.stderr_mean;
  }
  report.branch_ratio = result.branch_ratio;
  std::vector<std::vector<double>> samples;
  for (const auto& sample : result.sample_sq_norm) samples.push_back(Prefix(sample, result.target));
  const bool unknown_depth = model.config().family == models::Family::kTorchScript;
  if (options.output == jacobian::Output::kLossGradient) {
    report.theory = LossGradientTheory(model.config().num_layers);
  } else {
    report.theory = CompareWithTheory(unknown_depth ? 0 : model.config().num_layers, Prefix(final_stats.mean, result.target),
                                      result.branch_ratio, samples, unknown_depth ? std::vector<uint32_t>{} : WindowsOf(model.config()));
  }
  if (options.keep_samples) report.raw = result.raw.back();
  return report;
}

}  // namespace posbias::measure
