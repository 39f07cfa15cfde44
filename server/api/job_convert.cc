#include "server/api/job_convert.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include <google/protobuf/util/time_util.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/paging/page_token.h"
#include "server/limits/limits.h"
#include "server/api/density_convert.h"
#include "server/status/error.h"

namespace posbias::api {
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
  if (output == v1::JACOBIAN_OUTPUT_LOSS_GRADIENT) return jobs::JacobianOutput::kLossGradient;
  return jobs::JacobianOutput::kFinalHidden;
}
v1::JacobianOutput OutputToProto(jobs::JacobianOutput output) {
  switch (output) {
    case jobs::JacobianOutput::kLayerSweep: return v1::JACOBIAN_OUTPUT_LAYER_SWEEP;
    case jobs::JacobianOutput::kLogProb: return v1::JACOBIAN_OUTPUT_LOG_PROB;
    case jobs::JacobianOutput::kLossGradient: return v1::JACOBIAN_OUTPUT_LOSS_GRADIENT;
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

// The model the others are paired against: `model` (index 0) or the entry of `versus` named as it
// is named there (index i + 1).
absl::StatusOr<int64_t> ReferenceIndex(const v1::JacobianNormSpec& spec) {
  if (spec.reference().empty() || spec.reference() == spec.model() || spec.versus().empty()) return 0;
  std::vector<std::string> allowed = {spec.model()};
  for (int i = 0; i < spec.versus_size(); ++i) {
    if (spec.versus(i) == spec.reference()) return i + 1;
    allowed.push_back(spec.versus(i));
  }
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.jacobian_norm.reference", spec.reference(),
                               absl::StrCat("the job's model or an entry of versus: ", absl::StrJoin(allowed, ", "))});
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
  spec.init_seed = in.init_seed();
  // The models compared with `model`, by the names the request gives: submission binds each to
  // its registration as it binds `model` (job_submission.cc).
  if (static_cast<size_t>(in.versus_size()) > jobs::kMaxVersusModels) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.jacobian_norm.versus",
                                 absl::StrCat(in.versus_size(), " models"), absl::StrCat("at most ", jobs::kMaxVersusModels)});
  }
  for (const std::string& name : in.versus()) {
    jobs::JacobianJobSpec::VersusModel versus;
    versus.model = name;
    versus.init = name == jobs::kVersusInit;
    spec.versus.push_back(std::move(versus));
  }
  if (auto reference = ReferenceIndex(in); reference.ok()) {
    spec.reference = *reference;
  } else {
    return reference.status();
  }
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
  for (const auto& versus : job.spec.versus) spec->add_versus(versus.init ? std::string(jobs::kVersusInit) : versus.model);
  if (!job.spec.versus.empty() && job.spec.init_seed != 0) spec->set_init_seed(job.spec.init_seed);
  if (job.spec.reference > 0 && job.spec.reference <= static_cast<int64_t>(job.spec.versus.size())) {
    const auto& reference = job.spec.versus[static_cast<size_t>(job.spec.reference - 1)];
    spec->set_reference(reference.init ? std::string(jobs::kVersusInit) : reference.model);
  }
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
  progress->set_samples_total(static_cast<uint32_t>(jobs::WorkUnits(job.spec)));
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
  out->set_request_id(ClientRequestId(job.request_id));
}

std::string PrincipalRequestKey(const std::string& tenant, const std::string& principal, const std::string& request_id) {
  if (request_id.empty()) return request_id;
  return absl::StrCat(tenant, "/", principal, "/", request_id);
}

std::string ClientRequestId(const std::string& stored_key) {
  const auto slash = stored_key.rfind('/');
  return slash == std::string::npos ? stored_key : stored_key.substr(slash + 1);
}

void SpikeToProto(const jobs::BoundarySpike& spike, v1::BoundarySpike* out) {
  out->set_position(static_cast<uint32_t>(spike.position));
  out->set_ratio(spike.ratio);
  if (spike.ratio_mean) out->set_ratio_mean(*spike.ratio_mean);
  if (spike.ratio_std) out->set_ratio_std(*spike.ratio_std);
  if (spike.ratio_stderr) out->set_ratio_stderr(*spike.ratio_stderr);
  if (spike.samples) out->set_samples(static_cast<uint32_t>(*spike.samples));
}

void CorrelationToProto(const jobs::RecallCorrelation& correlation, v1::RecallCorrelation* out) {
  out->set_r(correlation.r);
  out->set_low(correlation.low);
  out->set_high(correlation.high);
  out->set_cells(static_cast<uint32_t>(correlation.cells));
}

void RecallToProto(const jobs::RecallSummary& summary, v1::RecallSummary* out) {
  out->set_chance(summary.chance);
  out->set_probes(summary.probes);
  for (const jobs::RecallDepth& measured : summary.depths) {
    auto* depth = out->add_depths();
    depth->set_depth(measured.depth);
    depth->set_probes(static_cast<uint32_t>(measured.probes));
    depth->set_correct(static_cast<uint32_t>(measured.correct));
    depth->set_accuracy(measured.accuracy);
    depth->set_accuracy_low(measured.accuracy_low);
    depth->set_accuracy_high(measured.accuracy_high);
    depth->set_log_prob_mean(measured.log_prob_mean);
    depth->set_log_prob_std(measured.log_prob_std);
    depth->set_log_prob_stderr(measured.log_prob_stderr);
    depth->set_pair_share_mean(measured.pair_share_mean);
    depth->set_pair_share_stderr(measured.pair_share_stderr);
    depth->set_pair_context_share_mean(measured.pair_context_share_mean);
    depth->set_pair_context_share_stderr(measured.pair_context_share_stderr);
  }
  if (summary.share_accuracy) CorrelationToProto(*summary.share_accuracy, out->mutable_share_accuracy());
}

}  // namespace posbias::api
