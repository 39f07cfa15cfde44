#include "server/jobs/jacobian_report.h"

#include <cmath>
#include <limits>
#include <type_traits>
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

// ---- The members of each struct, listed once ----------------------------------------------------
//
// Members(object, visit) calls visit(key, member) for each member in the order the report has
// always been printed; reading and writing are two visitors over the same list. A member wrapped
// in IfPresent was added after reports were first stored without being optional: written always,
// read when present (older reports keep the default). std::optional members are written when set
// and read when present.

template <typename T>
struct IfPresent {
  T& member;
};
template <typename T>
IfPresent<T> Later(T& member) {
  return {member};
}

template <typename Self, typename T>
using Same = std::enable_if_t<std::is_same_v<std::remove_const_t<Self>, T>, int>;

template <typename Self, typename Visit, Same<Self, ReportMetrics> = 0>
void Members(Self& m, Visit&& visit) {
  visit("spearman", m.spearman);
  visit("pearson_log", m.pearson_log);
  visit("rmse_log", m.rmse_log);
  visit("ks", m.ks);
  visit("wasserstein1", m.wasserstein1);
  visit("measured_last_weight", m.measured_last_weight);
  visit("model_last_weight", m.model_last_weight);
  visit("measured_floor", m.measured_floor);
  visit("model_floor", m.model_floor);
  visit("measured_last_jump", m.measured_last_jump);
  visit("model_last_jump", m.model_last_jump);
}

template <typename Self, typename Visit, Same<Self, FixedDepthFit> = 0>
void Members(Self& m, Visit&& visit) {
  visit("model", m.model);
  visit("alpha", m.alpha);
  visit("lambda", m.lambda);
  visit("lambda_sample_low", m.lambda_sample_low);
  visit("lambda_sample_high", m.lambda_sample_high);
  visit("bootstrap_resamples", m.bootstrap_resamples);
  visit("metrics", m.metrics);
  visit("profile", m.profile);
}

template <typename Self, typename Visit, Same<Self, RidgePoint> = 0>
void Members(Self& m, Visit&& visit) {
  visit("depth", m.depth);
  visit("alpha", m.alpha);
  visit("rmse_log", m.rmse_log);
}

template <typename Self, typename Visit, Same<Self, EffectiveDepthFit> = 0>
void Members(Self& m, Visit&& visit) {
  visit("model", m.model);
  visit("depth", m.depth);
  visit("alpha", m.alpha);
  visit("lambda", m.lambda);
  visit("lambda_low", m.lambda_low);
  visit("lambda_high", m.lambda_high);
  visit("lambda_sample_low", m.lambda_sample_low);
  visit("lambda_sample_high", m.lambda_sample_high);
  visit("metrics", m.metrics);
  visit("ridge", m.ridge);
  visit("profile", m.profile);
}

template <typename Self, typename Visit, Same<Self, MeasuredAlphaTheory> = 0>
void Members(Self& m, Visit&& visit) {
  visit("alpha", m.alpha);
  visit("coherent", m.coherent);
  visit("incoherent", m.incoherent);
  visit("coherent_profile", m.coherent_profile);
  visit("incoherent_profile", m.incoherent_profile);
}

template <typename Self, typename Visit, Same<Self, LayerProfile> = 0>
void Members(Self& m, Visit&& visit) {
  visit("layer", m.layer);
  visit("sq_norm_mean", m.sq_norm_mean);
  visit("sq_norm_stderr", m.sq_norm_stderr);
}

template <typename Self, typename Visit, Same<Self, TheoryComparison> = 0>
void Members(Self& m, Visit&& visit) {
  visit("depth", m.depth);
  visit("quantity", m.quantity);
  visit("note", m.note);
  visit("fits", m.fits);
  visit("effective_depth_fits", m.effective_depth_fits);
  visit("measured_alpha_schedule", m.measured_alpha_schedule);
  visit("fit_effective_depth", m.fit_effective_depth);
}

template <typename Self, typename Visit, Same<Self, ReportModel> = 0>
void Members(Self& m, Visit&& visit) {
  visit("family", m.family);
  visit("preset", m.preset);
  visit("layers", m.layers);
  visit("width", m.width);
  visit("heads", m.heads);
  visit("kv_heads", m.kv_heads);
  visit("mlp_width", m.mlp_width);
  visit("vocab", m.vocab);
  visit("max_positions", m.max_positions);
  visit("norm_eps", m.norm_eps);
  visit("rope_theta", m.rope_theta);
  visit("tie_embeddings", m.tie_embeddings);
  visit("cesaro_alpha", m.cesaro_alpha);
  visit("no_position_encoding", m.no_position_encoding);
  visit("uniform_attention", m.uniform_attention);
  visit("no_mlp", m.no_mlp);
  visit("parameters", m.parameters);
  visit("weights", m.weights);
  visit("init_recipe", m.init_recipe);
  visit("weights_sha256", m.weights_sha256);
  visit("source", m.source);
  visit("uid", m.uid);
  visit("sliding_window", m.sliding_window);
}

template <typename Self, typename Visit, Same<Self, ReportMeasurement> = 0>
void Members(Self& m, Visit&& visit) {
  visit("length", m.length);
  visit("target", m.target);
  visit("samples", m.samples);
  visit("method", m.method);
  visit("probes", m.probes);
  visit("output", m.output);
  visit("seed", m.seed);
  visit("input", m.input);
  visit("embedding", m.embedding);
  visit("dtype", m.dtype);
  visit("device", m.device);
  visit("torch_version", m.torch_version);
  visit("seconds", m.seconds);
  visit("vjp_count", m.vjp_count);
  visit("cotangent_batch", m.cotangent_batch);
  visit("checkpointed", m.checkpointed);
  visit("reverse_pass", m.reverse_pass);
  visit("pathway", m.pathway);
  visit("probe_distribution", m.probe_distribution);
}

template <typename Self, typename Visit, Same<Self, BoundarySpike> = 0>
void Members(Self& m, Visit&& visit) {
  visit("position", m.position);
  visit("ratio", m.ratio);
  visit("ratio_mean", m.ratio_mean);
  visit("ratio_std", m.ratio_std);
  visit("ratio_stderr", m.ratio_stderr);
  visit("samples", m.samples);
}

template <typename Self, typename Visit, Same<Self, NeedleDepth> = 0>
void Members(Self& m, Visit&& visit) {
  visit("depth", m.depth);
  visit("start", m.start);
  visit("tokens", m.tokens);
  visit("fillers", m.fillers);
  visit("share_mean", m.share_mean);
  visit("share_std", m.share_std);
  visit("share_stderr", m.share_stderr);
  visit("baseline_share_mean", m.baseline_share_mean);
  visit("baseline_share_std", m.baseline_share_std);
  visit("baseline_share_stderr", m.baseline_share_stderr);
}

template <typename Self, typename Visit, Same<Self, PathwayComparison> = 0>
void Members(Self& m, Visit&& visit) {
  visit("value_sq_norm_mean", m.value_sq_norm_mean);
  visit("value_sq_norm_std", m.value_sq_norm_std);
  visit("value_sq_norm_stderr", m.value_sq_norm_stderr);
  visit("ratio_mean", m.ratio_mean);
  visit("ratio_std", m.ratio_std);
  visit("ratio_stderr", m.ratio_stderr);
  visit("total_ratio_mean", m.total_ratio_mean);
  visit("total_ratio_std", m.total_ratio_std);
  visit("total_ratio_stderr", m.total_ratio_stderr);
  // The score/interference decomposition came later (reports before it lack these).
  visit("score_share_mean", Later(m.score_share_mean));
  visit("score_share_std", Later(m.score_share_std));
  visit("score_share_stderr", Later(m.score_share_stderr));
  visit("interference_share_mean", Later(m.interference_share_mean));
  visit("interference_share_std", Later(m.interference_share_std));
  visit("interference_share_stderr", Later(m.interference_share_stderr));
  visit("cosine_mean", Later(m.cosine_mean));
  visit("cosine_std", Later(m.cosine_std));
  visit("cosine_stderr", Later(m.cosine_stderr));
  visit("total_score_share_mean", Later(m.total_score_share_mean));
  visit("total_score_share_std", Later(m.total_score_share_std));
  visit("total_score_share_stderr", Later(m.total_score_share_stderr));
  visit("total_interference_share_mean",
        Later(m.total_interference_share_mean));
  visit("total_interference_share_std",
        Later(m.total_interference_share_std));
  visit("total_interference_share_stderr",
        Later(m.total_interference_share_stderr));
}

template <typename Self, typename Visit, Same<Self, ShareEstimate> = 0>
void Members(Self& m, Visit&& visit) {
  visit("mean", m.mean);
  visit("std", m.std);
  visit("stderr", m.stderr);
}

template <typename Self, typename Visit, Same<Self, PairedLogRatio> = 0>
void Members(Self& m, Visit&& visit) {
  visit("mean", m.mean);
  visit("std", m.std);
  visit("stderr", m.stderr);
  visit("low", m.low);
  visit("high", m.high);
  visit("samples", m.samples);
}

template <typename Self, typename Visit, Same<Self, BandStatistics> = 0>
void Members(Self& m, Visit&& visit) {
  visit("leading", m.leading);
  visit("middle", m.middle);
  visit("trailing", m.trailing);
  visit("first", m.first);
  visit("last", m.last);
  visit("middle_log_ratio", m.middle_log_ratio);
  visit("first_log_ratio", m.first_log_ratio);
  visit("last_log_ratio", m.last_log_ratio);
  visit("spearman", m.spearman);
}

template <typename Self, typename Visit, Same<Self, RecallDepth> = 0>
void Members(Self& m, Visit&& visit) {
  visit("depth", m.depth);
  visit("probes", m.probes);
  visit("correct", m.correct);
  visit("accuracy", m.accuracy);
  visit("accuracy_low", m.accuracy_low);
  visit("accuracy_high", m.accuracy_high);
  visit("log_prob_mean", m.log_prob_mean);
  visit("log_prob_std", m.log_prob_std);
  visit("log_prob_stderr", m.log_prob_stderr);
  visit("pair_share_mean", m.pair_share_mean);
  visit("pair_share_stderr", m.pair_share_stderr);
  visit("pair_context_share_mean", m.pair_context_share_mean);
  visit("pair_context_share_stderr", m.pair_context_share_stderr);
}

template <typename Self, typename Visit, Same<Self, RecallCorrelation> = 0>
void Members(Self& m, Visit&& visit) {
  visit("r", m.r);
  visit("low", m.low);
  visit("high", m.high);
  visit("cells", m.cells);
}

template <typename Self, typename Visit, Same<Self, RecallSummary> = 0>
void Members(Self& m, Visit&& visit) {
  visit("chance", m.chance);
  visit("probes", Later(m.probes));
  visit("depths", m.depths);
  visit("share_accuracy", m.share_accuracy);
}

template <typename Self, typename Visit, Same<Self, ComparedModel> = 0>
void Members(Self& m, Visit&& visit) {
  visit("model", m.model);
  visit("uid", m.uid);
  visit("weights_sha256", m.weights_sha256);
  visit("sq_norm_mean", m.sq_norm_mean);
  visit("sq_norm_stderr", m.sq_norm_stderr);
  Members(m.bands, visit);  // Flat: the all-positions statistics are the model's own fields.
  visit("boundary_spikes", m.boundary_spikes);
  visit("context", m.context);
  visit("recall", m.recall);
}

template <typename Self, typename Visit, Same<Self, ReportJob> = 0>
void Members(Self& m, Visit&& visit) {
  visit("id", m.id);
  visit("attempt", m.attempt);
  visit("resumed_samples", m.resumed_samples);
  visit("parts", m.parts);
}

template <typename Self, typename Visit, Same<Self, JacobianReport> = 0>
void Members(Self& m, Visit&& visit) {
  visit("model", m.model);
  visit("measurement", m.measurement);
  visit("tokens", m.tokens);
  visit("positions", m.positions);
  visit("sq_norm_mean", m.sq_norm_mean);
  visit("sq_norm_std", m.sq_norm_std);
  visit("sq_norm_stderr", m.sq_norm_stderr);
  visit("norm_mean", m.norm_mean);
  visit("norm_std", m.norm_std);
  visit("norm_stderr", m.norm_stderr);
  visit("sq_norm_estimator_stderr", m.sq_norm_estimator_stderr);
  visit("layers", m.layers);
  visit("pathways", m.pathways);
  visit("boundary_spikes", m.boundary_spikes);
  visit("needle_sweep", m.needle_sweep);
  visit("comparison", m.comparison);
  visit("recall", m.recall);
  visit("recall_correlation", m.recall_correlation);
  visit("branch_ratio", m.branch_ratio);
  visit("theory", m.theory);
  visit("raw", m.raw);
  visit("job", m.job);
}

// Whether T has a member list.
template <typename T, typename = void>
struct HasMembers : std::false_type {};
template <typename T>
struct HasMembers<T, std::void_t<decltype(Members(std::declval<T&>(), [](const char*, auto&) {}))>> : std::true_type {};

// ---- Reading ------------------------------------------------------------------------------------

template <typename T>
void Read(const Json& j, const std::string& path, std::vector<T>& out);
template <typename T, std::enable_if_t<HasMembers<T>::value, int> = 0>
void Read(const Json& j, const std::string& path, T& out);

// A member that every report has.
template <typename T>
void Field(const Json& object, const std::string& path, const char* key, T& out) {
  if (!object.is_object()) Malformed(path, "an object");
  auto it = object.find(key);
  if (it == object.end()) Malformed(absl::StrCat(path, ".", key), "present");
  Read(*it, absl::StrCat(path, ".", key), out);
}
// A member added after reports were first stored, read when present.
template <typename T>
void Field(const Json& object, const std::string& path, const char* key, IfPresent<T> out) {
  if (auto it = object.find(key); it != object.end()) Read(*it, absl::StrCat(path, ".", key), out.member);
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

template <typename T>
void Read(const Json& j, const std::string& path, std::vector<T>& out) {
  if (!j.is_array()) Malformed(path, "an array");
  out.assign(j.size(), T{});
  for (size_t i = 0; i < j.size(); ++i) Read(j[i], absl::StrCat(path, "[", i, "]"), out[i]);
}

template <typename T, std::enable_if_t<HasMembers<T>::value, int>>
void Read(const Json& j, const std::string& path, T& out) {
  if (!j.is_object()) Malformed(path, "an object");
  Members(out, [&](const char* key, auto&& member) { Field(j, path, key, member); });
}

// ---- Writing ------------------------------------------------------------------------------------

Ordered Value(double value) { return value; }  // NaN and infinities are written as null.
Ordered Value(int64_t value) { return value; }
Ordered Value(uint64_t value) { return value; }
Ordered Value(bool value) { return value; }
Ordered Value(const std::string& value) { return value; }
Ordered Value(TheoryModel value) { return TheoryModelName(value); }
Ordered Value(JacobianMethod value) { return MethodName(value); }
Ordered Value(JacobianOutput value) { return OutputName(value); }
Ordered Value(JacobianInput value) { return InputName(value); }
Ordered Value(Pathway value) { return PathwayName(value); }
Ordered Value(ProbeDistribution value) { return ProbeDistributionName(value); }
template <typename T, std::enable_if_t<HasMembers<T>::value, int> = 0>
Ordered Value(const T& object);
template <typename T>
Ordered Value(const std::vector<T>& items) {
  Ordered array = Ordered::array();
  for (const auto& item : items) array.push_back(Value(item));
  return array;
}

template <typename T>
void Put(Ordered& json, const char* key, const T& member) {
  json[key] = Value(member);
}
template <typename T>
void Put(Ordered& json, const char* key, const std::optional<T>& member) {
  if (member) json[key] = Value(*member);
}
template <typename T>
void Put(Ordered& json, const char* key, const IfPresent<T>& member) {
  json[key] = Value(member.member);
}

template <typename T, std::enable_if_t<HasMembers<T>::value, int>>
Ordered Value(const T& object) {
  Ordered json = Ordered::object();
  Members(object, [&](const char* key, const auto& member) { Put(json, key, member); });
  return json;
}

}  // namespace

std::string_view TheoryModelName(TheoryModel model) {
  return model == TheoryModel::kCoherent ? "coherent" : "incoherent";
}

nlohmann::ordered_json ReportToJson(const JacobianReport& report) { return Value(report); }

absl::StatusOr<JacobianReport> ReportFromJson(const nlohmann::json& json) {
  JacobianReport report;
  try {
    Read(json, "report", report);
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
