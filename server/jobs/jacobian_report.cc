#include "server/jobs/jacobian_report.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::jobs {
namespace {

using Json = nlohmann::json;
using Ordered = nlohmann::ordered_json;

// Reading: each Read overload checks one JSON value's type at `path` and throws MalformedReport,
// turned into one DATA_LOSS status at the door (ReportFromJson).
struct MalformedReport {
  std::string path, expected;
};

[[noreturn]] void Malformed(const std::string& path, const char* expected) { throw MalformedReport{path, expected}; }

void Read(const Json& j, const std::string& path, double& out) {
  if (j.is_null()) {
    out = std::numeric_limits<double>::quiet_NaN();  // How a non-finite number was written.
  } else if (j.is_number()) {
    out = j.get<double>();
  } else {
    Malformed(path, "a number");
  }
}
void Read(const Json& j, const std::string& path, int64_t& out) {
  if (!j.is_number_integer()) Malformed(path, "an integer");
  out = j.get<int64_t>();
}
void Read(const Json& j, const std::string& path, uint64_t& out) {
  if (!j.is_number_unsigned()) Malformed(path, "an unsigned integer");
  out = j.get<uint64_t>();
}
void Read(const Json& j, const std::string& path, bool& out) {
  if (!j.is_boolean()) Malformed(path, "true or false");
  out = j.get<bool>();
}
void Read(const Json& j, const std::string& path, std::string& out) {
  if (!j.is_string()) Malformed(path, "a string");
  out = j.get<std::string>();
}
template <typename Enum>
void ReadEnum(const Json& j, const std::string& path, absl::StatusOr<Enum> (*parse)(std::string_view), Enum& out) {
  std::string name;
  Read(j, path, name);
  auto parsed = parse(name);
  if (!parsed.ok()) Malformed(path, "a known name");
  out = *parsed;
}
absl::StatusOr<TheoryModel> ParseTheoryModel(std::string_view name) {
  if (name == "coherent") return TheoryModel::kCoherent;
  if (name == "incoherent") return TheoryModel::kIncoherent;
  return absl::InvalidArgumentError("not a theory model");
}
void Read(const Json& j, const std::string& path, TheoryModel& out) { ReadEnum(j, path, ParseTheoryModel, out); }
void Read(const Json& j, const std::string& path, JacobianMethod& out) { ReadEnum(j, path, ParseMethod, out); }
void Read(const Json& j, const std::string& path, JacobianOutput& out) { ReadEnum(j, path, ParseOutput, out); }
void Read(const Json& j, const std::string& path, JacobianInput& out) { ReadEnum(j, path, ParseInput, out); }
void Read(const Json& j, const std::string& path, Pathway& out) { ReadEnum(j, path, ParsePathway, out); }
void Read(const Json& j, const std::string& path, ProbeDistribution& out) {
  ReadEnum(j, path, ParseProbeDistribution, out);
}

void Read(const Json& j, const std::string& path, ReportMetrics& out);
void Read(const Json& j, const std::string& path, FixedDepthFit& out);
void Read(const Json& j, const std::string& path, RidgePoint& out);
void Read(const Json& j, const std::string& path, EffectiveDepthFit& out);
void Read(const Json& j, const std::string& path, MeasuredAlphaTheory& out);
void Read(const Json& j, const std::string& path, LayerProfile& out);
void Read(const Json& j, const std::string& path, TheoryComparison& out);
void Read(const Json& j, const std::string& path, ReportModel& out);
void Read(const Json& j, const std::string& path, ReportMeasurement& out);
void Read(const Json& j, const std::string& path, ReportJob& out);
void Read(const Json& j, const std::string& path, PathwayComparison& out);
void Read(const Json& j, const std::string& path, BoundarySpike& out);
void Read(const Json& j, const std::string& path, NeedleDepth& out);

template <typename T>
void Read(const Json& j, const std::string& path, std::vector<T>& out) {
  if (!j.is_array()) Malformed(path, "an array");
  out.assign(j.size(), T{});
  for (size_t i = 0; i < j.size(); ++i) Read(j[i], absl::StrCat(path, "[", i, "]"), out[i]);
}

// A member that every report has.
template <typename T>
void Field(const Json& object, const std::string& path, const char* key, T& out) {
  if (!object.is_object()) Malformed(path, "an object");
  auto it = object.find(key);
  if (it == object.end()) Malformed(absl::StrCat(path, ".", key), "present");
  Read(*it, absl::StrCat(path, ".", key), out);
}
// A member added after reports were first stored, read when present (older reports keep the
// default: a stored result stays readable).
template <typename T>
void FieldIfPresent(const Json& object, const std::string& path, const char* key, T& out) {
  if (auto it = object.find(key); it != object.end()) Read(*it, absl::StrCat(path, ".", key), out);
}
// A member added after the first reports, or present only for some measurements.
template <typename T>
void Field(const Json& object, const std::string& path, const char* key, std::optional<T>& out) {
  auto it = object.find(key);
  if (it == object.end()) return;
  T value{};
  Read(*it, absl::StrCat(path, ".", key), value);
  out = std::move(value);
}

void Read(const Json& j, const std::string& path, ReportMetrics& out) {
  Field(j, path, "spearman", out.spearman);
  Field(j, path, "pearson_log", out.pearson_log);
  Field(j, path, "rmse_log", out.rmse_log);
  Field(j, path, "ks", out.ks);
  Field(j, path, "wasserstein1", out.wasserstein1);
  Field(j, path, "measured_last_weight", out.measured_last_weight);
  Field(j, path, "model_last_weight", out.model_last_weight);
  Field(j, path, "measured_floor", out.measured_floor);
  Field(j, path, "model_floor", out.model_floor);
  Field(j, path, "measured_last_jump", out.measured_last_jump);
  Field(j, path, "model_last_jump", out.model_last_jump);
}

void Read(const Json& j, const std::string& path, FixedDepthFit& out) {
  Field(j, path, "model", out.model);
  Field(j, path, "alpha", out.alpha);
  Field(j, path, "lambda", out.lambda);
  Field(j, path, "lambda_sample_low", out.lambda_sample_low);
  Field(j, path, "lambda_sample_high", out.lambda_sample_high);
  Field(j, path, "bootstrap_resamples", out.bootstrap_resamples);
  Field(j, path, "metrics", out.metrics);
  Field(j, path, "profile", out.profile);
}

void Read(const Json& j, const std::string& path, RidgePoint& out) {
  Field(j, path, "depth", out.depth);
  Field(j, path, "alpha", out.alpha);
  Field(j, path, "rmse_log", out.rmse_log);
}

void Read(const Json& j, const std::string& path, EffectiveDepthFit& out) {
  Field(j, path, "model", out.model);
  Field(j, path, "depth", out.depth);
  Field(j, path, "alpha", out.alpha);
  Field(j, path, "lambda", out.lambda);
  Field(j, path, "lambda_low", out.lambda_low);
  Field(j, path, "lambda_high", out.lambda_high);
  Field(j, path, "lambda_sample_low", out.lambda_sample_low);
  Field(j, path, "lambda_sample_high", out.lambda_sample_high);
  Field(j, path, "metrics", out.metrics);
  Field(j, path, "ridge", out.ridge);
  Field(j, path, "profile", out.profile);
}

void Read(const Json& j, const std::string& path, MeasuredAlphaTheory& out) {
  Field(j, path, "alpha", out.alpha);
  Field(j, path, "coherent", out.coherent);
  Field(j, path, "incoherent", out.incoherent);
  Field(j, path, "coherent_profile", out.coherent_profile);
  Field(j, path, "incoherent_profile", out.incoherent_profile);
}

void Read(const Json& j, const std::string& path, LayerProfile& out) {
  Field(j, path, "layer", out.layer);
  Field(j, path, "sq_norm_mean", out.sq_norm_mean);
  Field(j, path, "sq_norm_stderr", out.sq_norm_stderr);
}

void Read(const Json& j, const std::string& path, TheoryComparison& out) {
  Field(j, path, "depth", out.depth);
  Field(j, path, "quantity", out.quantity);
  Field(j, path, "note", out.note);
  Field(j, path, "fits", out.fits);
  Field(j, path, "effective_depth_fits", out.effective_depth_fits);
  Field(j, path, "measured_alpha_schedule", out.measured_alpha_schedule);
  Field(j, path, "fit_effective_depth", out.fit_effective_depth);
}

void Read(const Json& j, const std::string& path, ReportModel& out) {
  Field(j, path, "family", out.family);
  Field(j, path, "preset", out.preset);
  Field(j, path, "layers", out.layers);
  Field(j, path, "width", out.width);
  Field(j, path, "heads", out.heads);
  Field(j, path, "kv_heads", out.kv_heads);
  Field(j, path, "mlp_width", out.mlp_width);
  Field(j, path, "vocab", out.vocab);
  Field(j, path, "max_positions", out.max_positions);
  Field(j, path, "norm_eps", out.norm_eps);
  Field(j, path, "rope_theta", out.rope_theta);
  Field(j, path, "tie_embeddings", out.tie_embeddings);
  Field(j, path, "cesaro_alpha", out.cesaro_alpha);
  Field(j, path, "no_position_encoding", out.no_position_encoding);
  Field(j, path, "uniform_attention", out.uniform_attention);
  Field(j, path, "no_mlp", out.no_mlp);
  Field(j, path, "parameters", out.parameters);
  Field(j, path, "weights", out.weights);
  Field(j, path, "init_recipe", out.init_recipe);
  Field(j, path, "weights_sha256", out.weights_sha256);
  Field(j, path, "source", out.source);
  Field(j, path, "uid", out.uid);
  Field(j, path, "sliding_window", out.sliding_window);
}

void Read(const Json& j, const std::string& path, ReportMeasurement& out) {
  Field(j, path, "length", out.length);
  Field(j, path, "target", out.target);
  Field(j, path, "samples", out.samples);
  Field(j, path, "method", out.method);
  Field(j, path, "probes", out.probes);
  Field(j, path, "output", out.output);
  Field(j, path, "seed", out.seed);
  Field(j, path, "input", out.input);
  Field(j, path, "embedding", out.embedding);
  Field(j, path, "dtype", out.dtype);
  Field(j, path, "device", out.device);
  Field(j, path, "torch_version", out.torch_version);
  Field(j, path, "seconds", out.seconds);
  Field(j, path, "vjp_count", out.vjp_count);
  Field(j, path, "cotangent_batch", out.cotangent_batch);
  Field(j, path, "checkpointed", out.checkpointed);
  Field(j, path, "reverse_pass", out.reverse_pass);
  Field(j, path, "pathway", out.pathway);
  Field(j, path, "probe_distribution", out.probe_distribution);
}

void Read(const Json& j, const std::string& path, BoundarySpike& out) {
  Field(j, path, "position", out.position);
  Field(j, path, "ratio", out.ratio);
  Field(j, path, "ratio_mean", out.ratio_mean);
  Field(j, path, "ratio_std", out.ratio_std);
  Field(j, path, "ratio_stderr", out.ratio_stderr);
  Field(j, path, "samples", out.samples);
}

void Read(const Json& j, const std::string& path, NeedleDepth& out) {
  Field(j, path, "depth", out.depth);
  Field(j, path, "start", out.start);
  Field(j, path, "tokens", out.tokens);
  Field(j, path, "fillers", out.fillers);
  Field(j, path, "share_mean", out.share_mean);
  Field(j, path, "share_std", out.share_std);
  Field(j, path, "share_stderr", out.share_stderr);
  Field(j, path, "baseline_share_mean", out.baseline_share_mean);
  Field(j, path, "baseline_share_std", out.baseline_share_std);
  Field(j, path, "baseline_share_stderr", out.baseline_share_stderr);
}

void Read(const Json& j, const std::string& path, PathwayComparison& out) {
  Field(j, path, "value_sq_norm_mean", out.value_sq_norm_mean);
  Field(j, path, "value_sq_norm_std", out.value_sq_norm_std);
  Field(j, path, "value_sq_norm_stderr", out.value_sq_norm_stderr);
  Field(j, path, "ratio_mean", out.ratio_mean);
  Field(j, path, "ratio_std", out.ratio_std);
  Field(j, path, "ratio_stderr", out.ratio_stderr);
  Field(j, path, "total_ratio_mean", out.total_ratio_mean);
  Field(j, path, "total_ratio_std", out.total_ratio_std);
  Field(j, path, "total_ratio_stderr", out.total_ratio_stderr);
  FieldIfPresent(j, path, "score_share_mean", out.score_share_mean);
  FieldIfPresent(j, path, "score_share_std", out.score_share_std);
  FieldIfPresent(j, path, "score_share_stderr", out.score_share_stderr);
  FieldIfPresent(j, path, "interference_share_mean", out.interference_share_mean);
  FieldIfPresent(j, path, "interference_share_std", out.interference_share_std);
  FieldIfPresent(j, path, "interference_share_stderr", out.interference_share_stderr);
  FieldIfPresent(j, path, "cosine_mean", out.cosine_mean);
  FieldIfPresent(j, path, "cosine_std", out.cosine_std);
  FieldIfPresent(j, path, "cosine_stderr", out.cosine_stderr);
  FieldIfPresent(j, path, "total_score_share_mean", out.total_score_share_mean);
  FieldIfPresent(j, path, "total_score_share_std", out.total_score_share_std);
  FieldIfPresent(j, path, "total_score_share_stderr", out.total_score_share_stderr);
  FieldIfPresent(j, path, "total_interference_share_mean", out.total_interference_share_mean);
  FieldIfPresent(j, path, "total_interference_share_std", out.total_interference_share_std);
  FieldIfPresent(j, path, "total_interference_share_stderr", out.total_interference_share_stderr);
}

void Read(const Json& j, const std::string& path, ReportJob& out) {
  Field(j, path, "id", out.id);
  Field(j, path, "attempt", out.attempt);
  Field(j, path, "resumed_samples", out.resumed_samples);
  Field(j, path, "parts", out.parts);
}

// Writing: members in the order posbias-measure has always printed them.
Ordered ToJson(const ReportMetrics& m) {
  return {{"spearman", m.spearman}, {"pearson_log", m.pearson_log}, {"rmse_log", m.rmse_log},
          {"ks", m.ks}, {"wasserstein1", m.wasserstein1},
          {"measured_last_weight", m.measured_last_weight}, {"model_last_weight", m.model_last_weight},
          {"measured_floor", m.measured_floor}, {"model_floor", m.model_floor},
          {"measured_last_jump", m.measured_last_jump}, {"model_last_jump", m.model_last_jump}};
}

template <typename T>
void PutOptional(Ordered& json, const char* key, const std::optional<T>& value) {
  if (value) json[key] = *value;
}

Ordered ToJson(const FixedDepthFit& fit) {
  Ordered json = {{"model", TheoryModelName(fit.model)}, {"alpha", fit.alpha}, {"lambda", fit.lambda}};
  PutOptional(json, "lambda_sample_low", fit.lambda_sample_low);
  PutOptional(json, "lambda_sample_high", fit.lambda_sample_high);
  PutOptional(json, "bootstrap_resamples", fit.bootstrap_resamples);
  json["metrics"] = ToJson(fit.metrics);
  json["profile"] = fit.profile;
  return json;
}

Ordered ToJson(const EffectiveDepthFit& fit) {
  Ordered ridge = Ordered::array();
  for (const auto& point : fit.ridge) {
    ridge.push_back({{"depth", point.depth}, {"alpha", point.alpha}, {"rmse_log", point.rmse_log}});
  }
  return {{"model", TheoryModelName(fit.model)}, {"depth", fit.depth}, {"alpha", fit.alpha},
          {"lambda", fit.lambda}, {"lambda_low", fit.lambda_low}, {"lambda_high", fit.lambda_high},
          {"lambda_sample_low", fit.lambda_sample_low}, {"lambda_sample_high", fit.lambda_sample_high},
          {"metrics", ToJson(fit.metrics)}, {"ridge", ridge}, {"profile", fit.profile}};
}

template <typename T>
Ordered ArrayOf(const std::vector<T>& items) {
  Ordered array = Ordered::array();
  for (const auto& item : items) array.push_back(ToJson(item));
  return array;
}

Ordered ToJson(const TheoryComparison& theory) {
  Ordered json = {{"depth", theory.depth}, {"quantity", theory.quantity}};
  PutOptional(json, "note", theory.note);
  if (theory.fits) json["fits"] = ArrayOf(*theory.fits);
  if (theory.effective_depth_fits) json["effective_depth_fits"] = ArrayOf(*theory.effective_depth_fits);
  if (const auto& measured = theory.measured_alpha_schedule) {
    json["measured_alpha_schedule"] = {{"alpha", measured->alpha},
                                       {"coherent", ToJson(measured->coherent)},
                                       {"incoherent", ToJson(measured->incoherent)},
                                       {"coherent_profile", measured->coherent_profile},
                                       {"incoherent_profile", measured->incoherent_profile}};
  }
  PutOptional(json, "fit_effective_depth", theory.fit_effective_depth);
  return json;
}

Ordered ToJson(const ReportModel& m) {
  Ordered json = {{"family", m.family}, {"preset", m.preset}, {"layers", m.layers}, {"width", m.width},
                  {"heads", m.heads}, {"kv_heads", m.kv_heads}, {"mlp_width", m.mlp_width}, {"vocab", m.vocab},
                  {"max_positions", m.max_positions}, {"norm_eps", m.norm_eps}, {"rope_theta", m.rope_theta},
                  {"tie_embeddings", m.tie_embeddings}, {"cesaro_alpha", m.cesaro_alpha},
                  {"no_position_encoding", m.no_position_encoding}, {"uniform_attention", m.uniform_attention},
                  {"no_mlp", m.no_mlp}, {"parameters", m.parameters}, {"weights", m.weights},
                  {"init_recipe", m.init_recipe}};
  PutOptional(json, "weights_sha256", m.weights_sha256);
  PutOptional(json, "source", m.source);
  PutOptional(json, "uid", m.uid);
  PutOptional(json, "sliding_window", m.sliding_window);
  return json;
}

Ordered ToJson(const ReportMeasurement& m) {
  Ordered json = {{"length", m.length}, {"target", m.target}, {"samples", m.samples}, {"method", MethodName(m.method)},
                  {"probes", m.probes}, {"output", OutputName(m.output)}, {"seed", m.seed}, {"input", InputName(m.input)},
                  {"embedding", m.embedding}, {"dtype", m.dtype}, {"device", m.device}, {"torch_version", m.torch_version},
                  {"seconds", m.seconds}, {"vjp_count", m.vjp_count}, {"cotangent_batch", m.cotangent_batch},
                  {"checkpointed", m.checkpointed}, {"reverse_pass", m.reverse_pass}};
  if (m.pathway) json["pathway"] = PathwayName(*m.pathway);
  if (m.probe_distribution) json["probe_distribution"] = ProbeDistributionName(*m.probe_distribution);
  return json;
}

Ordered ToJson(const PathwayComparison& p) {
  return {{"value_sq_norm_mean", p.value_sq_norm_mean}, {"value_sq_norm_std", p.value_sq_norm_std},
          {"value_sq_norm_stderr", p.value_sq_norm_stderr}, {"ratio_mean", p.ratio_mean},
          {"ratio_std", p.ratio_std}, {"ratio_stderr", p.ratio_stderr},
          {"total_ratio_mean", p.total_ratio_mean}, {"total_ratio_std", p.total_ratio_std},
          {"total_ratio_stderr", p.total_ratio_stderr}, {"score_share_mean", p.score_share_mean}, {"score_share_std", p.score_share_std}, {"score_share_stderr", p.score_share_stderr}, {"interference_share_mean", p.interference_share_mean}, {"interference_share_std", p.interference_share_std}, {"interference_share_stderr", p.interference_share_stderr}, {"cosine_mean", p.cosine_mean}, {"cosine_std", p.cosine_std}, {"cosine_stderr", p.cosine_stderr}, {"total_score_share_mean", p.total_score_share_mean}, {"total_score_share_std", p.total_score_share_std}, {"total_score_share_stderr", p.total_score_share_stderr}, {"total_interference_share_mean", p.total_interference_share_mean}, {"total_interference_share_std", p.total_interference_share_std}, {"total_interference_share_stderr", p.total_interference_share_stderr}};
}

}  // namespace

std::string_view TheoryModelName(TheoryModel model) {
  return model == TheoryModel::kCoherent ? "coherent" : "incoherent";
}

nlohmann::ordered_json ReportToJson(const JacobianReport& report) {
  Ordered json;
  json["model"] = ToJson(report.model);
  json["measurement"] = ToJson(report.measurement);
  json["tokens"] = report.tokens;
  json["positions"] = report.positions;
  json["sq_norm_mean"] = report.sq_norm_mean;
  json["sq_norm_std"] = report.sq_norm_std;
  json["sq_norm_stderr"] = report.sq_norm_stderr;
  json["norm_mean"] = report.norm_mean;
  json["norm_std"] = report.norm_std;
  json["norm_stderr"] = report.norm_stderr;
  PutOptional(json, "sq_norm_estimator_stderr", report.sq_norm_estimator_stderr);
  if (report.layers) {
    json["layers"] = Ordered::array();
    for (const auto& layer : *report.layers) {
      json["layers"].push_back({{"layer", layer.layer}, {"sq_norm_mean", layer.sq_norm_mean},
                                {"sq_norm_stderr", layer.sq_norm_stderr}});
    }
  }
  if (report.pathways) json["pathways"] = ToJson(*report.pathways);
  if (report.boundary_spikes) {
    json["boundary_spikes"] = Ordered::array();
    for (const auto& spike : *report.boundary_spikes) {
      Ordered item = {{"position", spike.position}, {"ratio", spike.ratio}};
      if (spike.ratio_mean) item["ratio_mean"] = *spike.ratio_mean;
      if (spike.ratio_std) item["ratio_std"] = *spike.ratio_std;
      if (spike.ratio_stderr) item["ratio_stderr"] = *spike.ratio_stderr;
      if (spike.samples) item["samples"] = *spike.samples;
      json["boundary_spikes"].push_back(std::move(item));
    }
  }
  if (report.needle_sweep) {
    json["needle_sweep"] = Ordered::array();
    for (const auto& d : *report.needle_sweep) {
      json["needle_sweep"].push_back({{"depth", d.depth}, {"start", d.start}, {"tokens", d.tokens}, {"fillers", d.fillers},
                                      {"share_mean", d.share_mean}, {"share_std", d.share_std},
                                      {"share_stderr", d.share_stderr}, {"baseline_share_mean", d.baseline_share_mean},
                                      {"baseline_share_std", d.baseline_share_std},
                                      {"baseline_share_stderr", d.baseline_share_stderr}});
    }
  }
  json["branch_ratio"] = report.branch_ratio;
  json["theory"] = ToJson(report.theory);
  PutOptional(json, "raw", report.raw);
  if (const auto& job = report.job) {
    json["job"] = {{"id", job->id}, {"attempt", job->attempt}, {"resumed_samples", job->resumed_samples},
                   {"parts", job->parts}};
  }
  return json;
}

absl::StatusOr<JacobianReport> ReportFromJson(const nlohmann::json& json) {
  JacobianReport report;
  const std::string root = "report";
  try {
    Field(json, root, "model", report.model);
    Field(json, root, "measurement", report.measurement);
    Field(json, root, "tokens", report.tokens);
    Field(json, root, "positions", report.positions);
    Field(json, root, "sq_norm_mean", report.sq_norm_mean);
    Field(json, root, "sq_norm_std", report.sq_norm_std);
    Field(json, root, "sq_norm_stderr", report.sq_norm_stderr);
    Field(json, root, "norm_mean", report.norm_mean);
    Field(json, root, "norm_std", report.norm_std);
    Field(json, root, "norm_stderr", report.norm_stderr);
    Field(json, root, "sq_norm_estimator_stderr", report.sq_norm_estimator_stderr);
    Field(json, root, "layers", report.layers);
    Field(json, root, "pathways", report.pathways);
    Field(json, root, "boundary_spikes", report.boundary_spikes);
    Field(json, root, "needle_sweep", report.needle_sweep);
    Field(json, root, "branch_ratio", report.branch_ratio);
    Field(json, root, "theory", report.theory);
    Field(json, root, "raw", report.raw);
    Field(json, root, "job", report.job);
  } catch (const MalformedReport& error) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, ErrorReason::kInternalError,
                           absl::StrCat("stored report: ", error.path, " is not ", error.expected));
  }
  return report;
}

absl::StatusOr<JacobianReport> ReportFromText(const std::string& text) {
  const auto json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, ErrorReason::kInternalError, "stored result is not JSON");
  }
  return ReportFromJson(json);
}

}  // namespace posbias::jobs
