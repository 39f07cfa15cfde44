#include "server/api/job_convert.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/util/time_util.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/admission/page_token.h"
#include "server/limits/limits.h"
#include "server/api/density_convert.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

using google::protobuf::util::TimeUtil;

// The proto's enums against the contract's, one pair per enum.
jobs::ComputeDtype DtypeFromProto(v1::ComputeDtype dtype) {
  switch (dtype) {
    case v1::BFLOAT16: return jobs::ComputeDtype::kBfloat16;
    case v1::FLOAT16: return jobs::ComputeDtype::kFloat16;
    case v1::FLOAT64: return jobs::ComputeDtype::kFloat64;
    default: return jobs::ComputeDtype::kFloat32;
  }
}
v1::ComputeDtype DtypeToProto(jobs::ComputeDtype dtype) {
  switch (dtype) {
    case jobs::ComputeDtype::kBfloat16: return v1::BFLOAT16;
    case jobs::ComputeDtype::kFloat16: return v1::FLOAT16;
    case jobs::ComputeDtype::kFloat64: return v1::FLOAT64;
    case jobs::ComputeDtype::kFloat32: return v1::FLOAT32;
  }
  return v1::FLOAT32;
}

jobs::JacobianOutput OutputFromProto(v1::JacobianOutput output) {
  if (output == v1::JACOBIAN_OUTPUT_LAYER_SWEEP) return jobs::JacobianOutput::kLayerSweep;
  if (output == v1::JACOBIAN_OUTPUT_LOG_PROB) return jobs::JacobianOutput::kLogProb;
  return jobs::JacobianOutput::kFinalHidden;
}
v1::JacobianOutput OutputToProto(jobs::JacobianOutput output) {
  switch (output) {
    case jobs::JacobianOutput::kLayerSweep: return v1::JACOBIAN_OUTPUT_LAYER_SWEEP;
    case jobs::JacobianOutput::kLogProb: return v1::JACOBIAN_OUTPUT_LOG_PROB;
    case jobs::JacobianOutput::kFinalHidden: return v1::JACOBIAN_OUTPUT_FINAL_HIDDEN;
  }
  return v1::JACOBIAN_OUTPUT_FINAL_HIDDEN;
}

jobs::JacobianMethod MethodFromProto(v1::JacobianMethod method) {
  return method == v1::JACOBIAN_METHOD_HUTCHINSON ? jobs::JacobianMethod::kHutchinson : jobs::JacobianMethod::kExact;
}
v1::JacobianMethod MethodToProto(jobs::JacobianMethod method) {
  return method == jobs::JacobianMethod::kHutchinson ? v1::JACOBIAN_METHOD_HUTCHINSON : v1::JACOBIAN_METHOD_EXACT;
}

// UNSPECIFIED: the default (jobs::kDefaultProbeDistribution). Undefined numbers never get here
// (the request's enums are checked once, api/enum_check.h).
jobs::ProbeDistribution ProbeDistributionFromProto(v1::ProbeDistribution distribution) {
  switch (distribution) {
    case v1::PROBE_DISTRIBUTION_GAUSSIAN: return jobs::ProbeDistribution::kGaussian;
    case v1::PROBE_DISTRIBUTION_RADEMACHER: return jobs::ProbeDistribution::kRademacher;
    case v1::PROBE_DISTRIBUTION_ORTHOGONAL: return jobs::ProbeDistribution::kOrthogonal;
    default: return jobs::kDefaultProbeDistribution;
  }
}
v1::ProbeDistribution ProbeDistributionToProto(jobs::ProbeDistribution distribution) {
  switch (distribution) {
    case jobs::ProbeDistribution::kGaussian: return v1::PROBE_DISTRIBUTION_GAUSSIAN;
    case jobs::ProbeDistribution::kRademacher: return v1::PROBE_DISTRIBUTION_RADEMACHER;
    case jobs::ProbeDistribution::kOrthogonal: return v1::PROBE_DISTRIBUTION_ORTHOGONAL;
  }
  return v1::PROBE_DISTRIBUTION_UNSPECIFIED;
}

jobs::DevicePreference DeviceFromProto(v1::DevicePreference device) {
  if (device == v1::DEVICE_CPU) return jobs::DevicePreference::kCpu;
  if (device == v1::DEVICE_CUDA) return jobs::DevicePreference::kCuda;
  return jobs::DevicePreference::kAny;
}
v1::DevicePreference DeviceToProto(jobs::DevicePreference device) {
  switch (device) {
    case jobs::DevicePreference::kCpu: return v1::DEVICE_CPU;
    case jobs::DevicePreference::kCuda: return v1::DEVICE_CUDA;
    case jobs::DevicePreference::kAny: return v1::DEVICE_PREFERENCE_UNSPECIFIED;
  }
  return v1::DEVICE_PREFERENCE_UNSPECIFIED;
}

void ReadInput(const v1::JacobianInput& input, jobs::JacobianJobSpec& spec) {
  if (input.has_given_tokens()) {
    spec.input = jobs::JacobianInput::kGivenTokens;
    for (const auto& sequence : input.given_tokens().sequences()) {
      std::vector<int64_t> ids(sequence.token_ids().begin(), sequence.token_ids().end());
      if (sequence.has_next_token_id()) ids.push_back(sequence.next_token_id());
      spec.tokens.push_back(std::move(ids));
    }
    spec.samples = static_cast<int64_t>(spec.tokens.size());
  } else if (input.has_gaussian_embeddings()) {
    spec.input = jobs::JacobianInput::kGaussianEmbeddings;
    const auto& gaussian = input.gaussian_embeddings();
    if (gaussian.has_seed()) spec.seed = gaussian.seed();
    if (gaussian.has_stddev()) spec.embedding_std = gaussian.stddev();
  } else if (input.random_tokens().has_seed()) {
    spec.seed = input.random_tokens().seed();
  }
}

void WriteInput(const jobs::JacobianJobSpec& spec, v1::JacobianInput* input) {
  switch (spec.input) {
    case jobs::JacobianInput::kGaussianEmbeddings:
      input->mutable_gaussian_embeddings()->set_seed(spec.seed);
      input->mutable_gaussian_embeddings()->set_stddev(spec.embedding_std);
      break;
    case jobs::JacobianInput::kGivenTokens:
      input->mutable_given_tokens()->set_sequence_count(static_cast<uint32_t>(spec.tokens.size()));
      break;
    case jobs::JacobianInput::kRandomTokens:
      input->mutable_random_tokens()->set_seed(spec.seed);
      break;
  }
}

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
        {v1::INCOHERENT, {&measured.incoherent_profile, &measured.incoherent}}};
    for (const auto& [model, data] : curves) {
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

}  // namespace

absl::StatusOr<jobs::JobRecord> RecordFromRequest(const v1::SubmitJobRequest& request, uint64_t drawn_seed) {
  if (!request.spec().has_jacobian_norm()) {
    return InvalidArgumentError(
        {ErrorReason::kEmptyRequest, "spec.jacobian_norm", "not set", "a Jacobian-norm job spec"});
  }
  const auto& in = request.spec().jacobian_norm();
  jobs::JobRecord job;
  auto& spec = job.spec;
  spec.model = in.model();
  spec.length = in.sequence_length();
  spec.samples = in.samples() == 0 ? 16 : in.samples();
  spec.target = in.has_target_position() ? in.target_position() : 0;
  spec.method = MethodFromProto(in.method());
  spec.probes = in.probes() == 0 ? 64 : in.probes();
  spec.output = OutputFromProto(in.output());
  spec.dtype = DtypeFromProto(in.dtype());
  spec.keep_samples = in.return_raw_samples();
  spec.fit_effective_depth = in.fit_effective_depth();
  spec.pathway = in.pathway() == v1::JACOBIAN_PATHWAY_VALUE_ONLY ? jobs::Pathway::kValueOnly : jobs::Pathway::kFull;
  if (!v1::JacobianPathway_IsValid(in.pathway())) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.jacobian_norm.pathway", std::to_string(in.pathway()),
                                 "FULL or VALUE_ONLY"});
  }
  spec.probe_distribution = ProbeDistributionFromProto(in.probe_distribution());
  spec.compare_pathways = in.compare_pathways();
  if (spec.compare_pathways && spec.pathway != jobs::Pathway::kFull) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.jacobian_norm.compare_pathways", "true",
                                 "only with pathway FULL (the comparison measures both)"});
  }
  spec.seed = drawn_seed;
  ReadInput(in.input(), spec);
  spec.device = DeviceFromProto(request.spec().device());
  job.worker_kind = std::string(jobs::DeviceName(spec.device));
  job.priority = request.spec().priority();
  job.time_limit_seconds =
      request.spec().has_time_limit() ? TimeUtil::DurationToMilliseconds(request.spec().time_limit()) / 1000.0 : 0;
  job.labels.insert(request.labels().begin(), request.labels().end());
  job.request_id = request.request_id();
  return job;
}

bool RequestNamesSeed(const v1::SubmitJobRequest& request) {
  const auto& input = request.spec().jacobian_norm().input();
  return input.random_tokens().has_seed() || input.gaussian_embeddings().has_seed();
}

bool RequestMatchesJob(jobs::JobRecord requested, bool names_seed, const jobs::JobRecord& existing) {
  if (!names_seed) requested.spec.seed = existing.spec.seed;
  // What the server recorded of the model is not part of the client's request.
  requested.spec.model_uid = existing.spec.model_uid;
  requested.spec.model_weights_sha256 = existing.spec.model_weights_sha256;
  return jobs::SpecToJson(requested.spec) == jobs::SpecToJson(existing.spec) && requested.priority == existing.priority &&
         requested.time_limit_seconds == existing.time_limit_seconds && requested.labels == existing.labels &&
         requested.worker_kind == existing.worker_kind;
}

void JobToProto(const jobs::JobRecord& job, v1::Job* out) {
  out->set_id(job.id);
  out->set_model_uid(job.spec.model_uid);
  out->set_model_weights_sha256(job.spec.model_weights_sha256);
  auto* spec = out->mutable_spec()->mutable_jacobian_norm();
  spec->set_model(job.spec.model);
  spec->set_sequence_length(static_cast<uint32_t>(job.spec.length));
  spec->set_samples(static_cast<uint32_t>(job.spec.samples));
  if (job.spec.target > 0) spec->set_target_position(static_cast<uint32_t>(job.spec.target));
  spec->set_method(MethodToProto(job.spec.method));
  spec->set_probes(job.spec.method == jobs::JacobianMethod::kHutchinson ? static_cast<uint32_t>(job.spec.probes) : 0);
  spec->set_output(OutputToProto(job.spec.output));
  spec->set_dtype(DtypeToProto(job.spec.dtype));
  spec->set_return_raw_samples(job.spec.keep_samples);
  spec->set_pathway(job.spec.pathway == jobs::Pathway::kValueOnly ? v1::JACOBIAN_PATHWAY_VALUE_ONLY
                                                                  : v1::JACOBIAN_PATHWAY_FULL);
  spec->set_compare_pathways(job.spec.compare_pathways);
  if (job.spec.method == jobs::JacobianMethod::kHutchinson) {
    spec->set_probe_distribution(ProbeDistributionToProto(job.spec.probe_distribution));
  }
  WriteInput(job.spec, spec->mutable_input());
  out->mutable_spec()->set_priority(job.priority);
  out->mutable_spec()->set_device(DeviceToProto(job.spec.device));
  if (job.time_limit_seconds > 0) {
    *out->mutable_spec()->mutable_time_limit() =
        TimeUtil::MillisecondsToDuration(static_cast<int64_t>(job.time_limit_seconds * 1000));
  }
  out->set_state(static_cast<v1::JobState>(static_cast<int>(job.state)));
  auto* progress = out->mutable_progress();
  progress->set_fraction(job.progress);
  progress->set_samples_done(static_cast<uint32_t>(job.samples_done));
  progress->set_samples_total(static_cast<uint32_t>(job.spec.samples));
  progress->set_chunks_done(static_cast<uint32_t>(job.chunks_done));
  progress->set_chunks_total(static_cast<uint32_t>(job.chunks_total));
  if (job.eta_seconds >= 0 && !jobs::IsTerminal(job.state)) progress->set_estimated_seconds_remaining(job.eta_seconds);
  // Attempts count from 1 at submission; a queued job shows the attempt it will run as.
  out->set_attempt(static_cast<uint32_t>(job.state == jobs::JobState::kQueued ? job.attempt + 1
                                                                              : std::max(1, job.attempt)));
  *out->mutable_create_time() = TimeUtil::MillisecondsToTimestamp(job.created_ms);
  if (job.started_ms > 0) *out->mutable_start_time() = TimeUtil::MillisecondsToTimestamp(job.started_ms);
  if (job.finished_ms > 0) *out->mutable_finish_time() = TimeUtil::MillisecondsToTimestamp(job.finished_ms);
  *out->mutable_update_time() = TimeUtil::MillisecondsToTimestamp(job.updated_ms);
  out->set_device(job.device);
  if (job.state == jobs::JobState::kFailed) {
    v1::ErrorReason reason = v1::INTERNAL_ERROR;
    v1::ErrorReason_Parse(job.error_reason, &reason);
    out->mutable_error()->set_reason(reason);
    out->mutable_error()->set_code(job.error_code);
    out->mutable_error()->set_message(job.error_message);
  }
  out->mutable_labels()->insert(job.labels.begin(), job.labels.end());
  out->set_request_id(ClientRequestId(job.tenant, job.request_id));
}

std::string TenantRequestKey(const std::string& tenant, const std::string& request_id) {
  if (tenant.empty() || request_id.empty()) return request_id;
  return absl::StrCat(tenant, "/", request_id);
}

std::string ClientRequestId(const std::string& tenant, const std::string& stored_key) {
  const std::string prefix = tenant.empty() ? "" : tenant + "/";
  if (!prefix.empty() && stored_key.rfind(prefix, 0) == 0) return stored_key.substr(prefix.size());
  return stored_key;
}

namespace {

// One page of `count` selected positions from `index` on: the header fields, the positions and
// every per-position array, and the token of the next page when positions remain.
absl::Status FillPage(const v1::GetJobResultRequest& request, const jobs::JacobianReport& report,
                      const std::string& selection, uint32_t first, uint32_t stride, uint64_t index, uint64_t count,
                      uint64_t selected, v1::GetJobResultResponse* response) {
  response->Clear();
  response->set_id(request.id());
  auto* result = response->mutable_jacobian_norm();
  const auto& measurement = report.measurement;
  const auto length = static_cast<uint32_t>(measurement.target);
  result->set_sequence_length(static_cast<uint32_t>(measurement.length));
  result->set_target_position(static_cast<uint32_t>(measurement.target));
  result->set_samples(static_cast<uint32_t>(measurement.samples));
  result->set_num_layers(static_cast<uint32_t>(report.model.layers));
  const uint64_t stop = std::min<uint64_t>(selected, index + count);
  std::vector<uint32_t> positions;
  for (uint64_t i = index; i < stop; ++i) positions.push_back(first + static_cast<uint32_t>(i) * stride);
  result->mutable_positions()->Add(positions.begin(), positions.end());

  auto* stats = result->mutable_profile()->mutable_stats();
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
  if (length >= 3) {
    TheoryPage(positions, request.omit_theory(), result->mutable_profile()->mutable_theory()).Fill(report.theory);
  }
  // A layer sweep's profile per layer, on the same positions.
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
  // Per-layer branch ratios (attention weight of each layer, averaged over samples).
  uint32_t layer = 0;
  for (double ratio : report.branch_ratio) {
    auto* branch = result->add_branch_ratios();
    branch->set_layer(++layer);
    branch->set_attention_mean(ratio);
  }
  if (request.include_raw_samples() && !report.raw) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           "the job was submitted without return_raw_samples: no per-sample values were kept");
  }
  if (report.pathways) {
    const auto& comparison = *report.pathways;
    auto* pathways = result->mutable_pathways();
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
  FillSamples(request, report, positions, result);
  if (stop < selected) {
    response->set_next_page_token(admission::IssuePageToken("GetJobResult", selection, std::to_string(stop)));
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
  auto cursor = admission::RedeemPageToken(request.page_token(), "GetJobResult", selection);
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
  uint64_t count = std::max<uint64_t>(1, std::min<uint64_t>(page_size, selected - std::min(index, selected)));
  while (true) {
    if (auto status = FillPage(request, report, selection, first, stride, index, count, selected, response); !status.ok()) {
      return status;
    }
    const size_t bytes = response->ByteSizeLong();
    if (bytes + reserved_bytes <= budget) return absl::OkStatus();
    if (count == 1 && bytes <= budget) return absl::OkStatus();  // The report alone passes the limit.
    if (count == 1) {
      response->Clear();
      return TooLargeError("one position of the result page", absl::StrCat(bytes, " bytes"),
                           absl::StrCat(limits::Allowed(limits::Limit::kMaxResultPageBytes),
                                        "; ask for fewer samples (first_sample, sample_count) or leave out raw samples"));
    }
    // Shrink in proportion, with a margin, and at least by half.
    const double room = budget > reserved_bytes ? static_cast<double>(budget - reserved_bytes) : 0.0;
    count = std::max<uint64_t>(1, std::min<uint64_t>(count / 2, static_cast<uint64_t>(0.9 * count * room / bytes)));
  }
}

}  // namespace posbias::service
