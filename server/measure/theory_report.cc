#include "server/measure/theory_report.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <utility>

#include "server/density/comparison.h"
#include "server/density/discrete.h"
#include "server/density/fit.h"
#include "server/density/summary.h"

namespace posbias::measure {
namespace {

nlohmann::ordered_json MetricsJson(const density::ComparisonMetrics& m) {
  return {{"spearman", m.spearman}, {"pearson_log", m.pearson_log}, {"rmse_log", m.rmse_log},
          {"ks", m.ks}, {"wasserstein1", m.wasserstein1},
          {"measured_last_weight", m.measured_last_weight}, {"model_last_weight", m.model_last_weight},
          {"measured_floor", m.measured_floor}, {"model_floor", m.model_floor},
          {"measured_last_jump", m.measured_last_jump}, {"model_last_jump", m.model_last_jump}};
}

nlohmann::ordered_json ConfigJson(models::DecoderModel& model, const std::string& weights) {
  const auto& c = model.config();
  return {{"family", models::FamilyName(c.family)}, {"preset", c.preset}, {"layers", c.num_layers},
          {"width", c.hidden_size}, {"heads", c.num_heads}, {"kv_heads", c.num_kv_heads},
          {"mlp_width", c.intermediate_size}, {"vocab", c.vocab_size}, {"max_positions", c.max_positions},
          {"norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta}, {"tie_embeddings", c.tie_embeddings},
          {"cesaro_alpha", c.cesaro_alpha},
          {"no_position_encoding", c.ablations.no_position_encoding},
          {"uniform_attention", c.ablations.uniform_attention}, {"no_mlp", c.ablations.no_mlp},
          {"parameters", models::ParameterCount(model)},
          {"weights", weights.empty() ? "seeded initialization" : weights},
          {"init_recipe", weights.empty() ? model.init_recipe() : "loaded from " + weights}};
}

// Profile of positions 1..t (later positions cannot influence position t).
std::vector<double> Prefix(const std::vector<double>& values, int64_t target) {
  return {values.begin(), values.begin() + target};
}

// The sampling interval of each model's fitted lambda: a 95 % percentile bootstrap over samples
// (kResamples resamples of the S per-sample profiles with replacement, alpha refitted at the
// fixed depth; a fixed seed, so the report is reproducible). {lambda, lambda} when S = 1.
constexpr int kResamples = 200;

std::map<density::Model, std::pair<double, double>> BootstrapLambda(
    int64_t depth, const std::vector<std::vector<double>>& samples, int64_t target) {
  std::map<density::Model, std::vector<double>> lambdas;
  std::mt19937_64 generator(20260329);
  std::uniform_int_distribution<size_t> pick(0, samples.size() - 1);
  density::FitOptions options;
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
// depth 1 and the effective-depth ridge spans all depths 1..64.
nlohmann::ordered_json Theory(int64_t depth, const std::vector<double>& measured,
                              const std::vector<double>& branch_ratio,
                              const std::vector<std::vector<double>>& samples) {
  const bool unknown_depth = depth == 0;
  depth = std::max<int64_t>(depth, 1);
  nlohmann::ordered_json theory = {{"depth", depth}, {"quantity", "squared_norm"}};
  if (measured.size() < 3 || !density::CheckProfileValues(measured, "sq_norm_mean").ok() ||
      depth > static_cast<int64_t>(density::kMaxFitDepth)) {
    theory["note"] = "no fit: the profile needs at least 3 finite, non-negative values";
    return theory;
  }
  density::FitOptions options;
  options.min_depth = options.max_depth = static_cast<uint32_t>(depth);
  options.include_profiles = true;
  auto fits = density::FitProfile(measured, options);
  theory["fits"] = nlohmann::ordered_json::array();
  if (fits.ok()) {
    const auto intervals = samples.size() > 1 ? BootstrapLambda(depth, samples, static_cast<int64_t>(measured.size()))
                                              : std::map<density::Model, std::pair<double, double>>{};
    for (const auto& fit : *fits) {
      const auto interval = intervals.count(fit.model) ? intervals.at(fit.model) : std::pair{fit.lambda, fit.lambda};
      // `profile`: the fitted theory on the measured positions 1..t, normalized to sum 1 (compare
      // with sq_norm_mean / its sum). `lambda_sample_low/high`: the bootstrap interval over samples.
      theory["fits"].push_back({{"model", fit.model == density::Model::kCoherent ? "coherent" : "incoherent"},
                                {"alpha", fit.alpha}, {"lambda", fit.lambda},
                                {"lambda_sample_low", interval.first}, {"lambda_sample_high", interval.second},
                                {"bootstrap_resamples", samples.size() > 1 ? kResamples : 0},
                                {"metrics", MetricsJson(fit.metrics)}, {"profile", fit.profile}});
    }
  }
  // The effective depth too (THEORY.md section 8): real profiles pin lambda = alpha H far better
  // than H and alpha apart, so the ridge over depths 1..min(4H, 64) is reported with its interval.
  density::FitOptions ridge;
  ridge.include_profiles = true;
  ridge.min_depth = 1;
  ridge.max_depth = static_cast<uint32_t>(unknown_depth ? density::kMaxFitDepthCount
                                                        : std::min<int64_t>(4 * depth, density::kMaxFitDepthCount));
  if (uint64_t{ridge.max_depth} * measured.size() <= density::kMaxFitWork) {
    auto ridge_fits = density::FitProfile(measured, ridge);
    theory["effective_depth_fits"] = nlohmann::ordered_json::array();
    if (ridge_fits.ok()) {
      for (const auto& fit : *ridge_fits) {
        nlohmann::ordered_json points = nlohmann::ordered_json::array();
        for (const auto& point : fit.ridge) {
          points.push_back({{"depth", point.depth}, {"alpha", point.alpha}, {"rmse_log", point.rmse_log}});
        }
        // The sampling interval with alpha refitted at this fit's depth.
        auto interval = std::pair{fit.lambda, fit.lambda};
        if (samples.size() > 1) {
          const auto intervals = BootstrapLambda(fit.depth, samples, static_cast<int64_t>(measured.size()));
          if (intervals.count(fit.model)) interval = intervals.at(fit.model);
        }
        theory["effective_depth_fits"].push_back(
            {{"model", fit.model == density::Model::kCoherent ? "coherent" : "incoherent"},
             {"depth", fit.depth}, {"alpha", fit.alpha}, {"lambda", fit.lambda},
             {"lambda_low", fit.lambda_low}, {"lambda_high", fit.lambda_high},
             {"lambda_sample_low", interval.first}, {"lambda_sample_high", interval.second},
             {"metrics", MetricsJson(fit.metrics)}, {"ridge", points}, {"profile", fit.profile}});
      }
    }
  }
  if (!branch_ratio.empty()) {
    auto routing = density::MakeScheduledRouting(0, branch_ratio);
    if (routing.ok()) {
      auto profiles = density::ComputeDiscreteProfiles(*routing, measured.size());
      if (profiles.ok()) {
        std::vector<double> coherent_sq(profiles->coherent.size());
        std::transform(profiles->coherent.begin(), profiles->coherent.end(), coherent_sq.begin(),
                       [](double v) { return v * v; });
        theory["measured_alpha_schedule"] = {
            {"alpha", branch_ratio},
            {"coherent", MetricsJson(density::CompareProfiles(measured, coherent_sq))},
            {"incoherent", MetricsJson(density::CompareProfiles(measured, profiles->incoherent))},
            {"coherent_profile", density::Normalized(coherent_sq)},
            {"incoherent_profile", density::Normalized(profiles->incoherent)}};
      }
    }
  }
  return theory;
}

const char* MethodName(jacobian::Method method) { return method == jacobian::Method::kExact ? "exact" : "hutchinson"; }

const char* OutputName(jacobian::Output output) {
  switch (output) {
    case jacobian::Output::kFinalHidden: return "final_hidden";
    case jacobian::Output::kLayerSweep: return "layer_sweep";
    case jacobian::Output::kLogProb: return "log_prob";
  }
  return "?";
}

}  // namespace

nlohmann::ordered_json ReportJson(models::DecoderModel& model, const jacobian::MeasureOptions& options,
                                  const jacobian::MeasureResult& result, const std::string& weights) {
  nlohmann::ordered_json json;
  json["model"] = ConfigJson(model, weights);
  const bool gaussian = options.input == jacobian::InputKind::kGaussianEmbeddings;
  json["measurement"] = {
      {"length", result.length}, {"target", result.target}, {"samples", options.samples},
      {"method", MethodName(options.method)}, {"probes", options.method == jacobian::Method::kHutchinson ? options.probes : 0},
      {"output", OutputName(options.output)}, {"seed", options.seed},
      {"input", gaussian ? "gaussian_embeddings" : (options.input == jacobian::InputKind::kGivenTokens ? "given_tokens" : "random_tokens")},
      {"embedding", gaussian ? "gaussian e_j" : (model.embeds_positions() ? "token + learned position embedding" : "token embedding")},
      {"dtype", result.dtype_name}, {"device", result.device_name}, {"torch_version", result.torch_version},
      {"seconds", result.seconds}, {"vjp_count", result.vjp_count}, {"cotangent_batch", result.cotangent_batch},
      {"checkpointed", result.checkpointed}, {"reverse_pass", result.reverse_pass}};
  json["tokens"] = result.tokens;
  std::vector<int64_t> positions(result.length);
  std::iota(positions.begin(), positions.end(), 1);
  json["positions"] = positions;
  const auto& final_stats = result.sq_norm.back();
  json["sq_norm_mean"] = final_stats.mean;
  json["sq_norm_std"] = final_stats.std;
  json["sq_norm_stderr"] = final_stats.stderr_mean;
  json["norm_mean"] = result.norm.back().mean;
  json["norm_std"] = result.norm.back().std;
  json["norm_stderr"] = result.norm.back().stderr_mean;
  if (!result.estimator_stderr.empty()) json["sq_norm_estimator_stderr"] = result.estimator_stderr.back();
  if (options.output == jacobian::Output::kLayerSweep) {
    json["layers"] = nlohmann::ordered_json::array();
    for (size_t l = 0; l < result.sq_norm.size(); ++l) {
      json["layers"].push_back({{"layer", l + 1}, {"sq_norm_mean", result.sq_norm[l].mean},
                                {"sq_norm_stderr", result.sq_norm[l].stderr_mean}});
    }
  }
  json["branch_ratio"] = result.branch_ratio;
  std::vector<std::vector<double>> samples;
  for (const auto& sample : result.sample_sq_norm) samples.push_back(Prefix(sample, result.target));
  const bool unknown_depth = model.config().family == models::Family::kTorchScript;
  json["theory"] = Theory(unknown_depth ? 0 : model.config().num_layers, Prefix(final_stats.mean, result.target),
                          result.branch_ratio, samples);
  if (options.keep_samples) json["raw"] = result.raw.back();
  return json;
}

}  // namespace posbias::measure
