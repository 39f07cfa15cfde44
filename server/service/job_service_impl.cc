#include "server/service/job_service_impl.h"

#include <chrono>
#include <fstream>
#include <random>
#include <thread>
#include <utility>
#include <vector>

#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/service/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

constexpr char kPrefix[] = "/posbias.v1.JobService/";
using google::protobuf::util::TimeUtil;

std::string DtypeName(v1::ComputeDtype dtype) {
  switch (dtype) {
    case v1::BFLOAT16: return "bfloat16";
    case v1::FLOAT16: return "float16";
    case v1::FLOAT64: return "float64";
    default: return "float32";
  }
}

v1::ComputeDtype DtypeToProto(const std::string& name) {
  if (name == "bfloat16") return v1::BFLOAT16;
  if (name == "float16") return v1::FLOAT16;
  if (name == "float64") return v1::FLOAT64;
  return v1::FLOAT32;
}

// Bytes a job needs at least, with activation checkpointing: the float32 parameters, every layer's
// input for one row, and one layer's activations (attention scores dominate at long L).
double MinimumJobBytes(const registry::ModelEntry& model, int64_t length) {
  const auto& c = model.config;
  const double parameters = model.memory_bytes > 0 ? static_cast<double>(model.memory_bytes)
                                                   : 4.0 * 12 * c.num_layers * c.hidden_size * c.hidden_size;
  const double inputs = 4.0 * length * c.hidden_size * (c.num_layers + 1);
  const double layer = 4.0 * (length * (12.0 * c.hidden_size + 3.0 * c.intermediate_size) +
                              2.0 * c.num_heads * static_cast<double>(length) * length);
  return parameters + inputs + layer;
}

// Total memory of the host (the CPU worker's device), from /proc/meminfo; 0 when unknown.
double HostMemoryBytes() {
  std::ifstream meminfo("/proc/meminfo");
  std::string key, unit;
  double kib = 0;
  while (meminfo >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib * 1024;
  }
  return 0;
}

uint64_t DrawSeed() { return std::random_device{}() * uint64_t{0x100000000} + std::random_device{}(); }

// Reads the public spec into the store's plain form, checking it against the model and limits.
absl::StatusOr<jobs::JobRecord> RecordFromRequest(const v1::SubmitJobRequest& request,
                                                  registry::ModelRegistry& registry, const JobLimits& limits) {
  if (!request.spec().has_jacobian_norm()) {
    return InvalidArgumentError({"EMPTY_REQUEST", "spec.jacobian_norm", "not set", "a Jacobian-norm job spec"});
  }
  const auto& in = request.spec().jacobian_norm();
  auto model = registry.Get(in.model());
  if (!model.ok()) return model.status();
  if (model->state == registry::ModelState::kFailed) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "MODEL_NOT_READY",
                           absl::StrCat("model ", in.model(), " failed to load: ", model->error_message));
  }
  const int64_t max_length = std::min<int64_t>(limits.max_sequence_length, model->config.max_positions);
  if (in.sequence_length() < 1 || in.sequence_length() > max_length) {
    return InvalidArgumentError({"INVALID_LENGTH", "spec.jacobian_norm.sequence_length",
                                 std::to_string(in.sequence_length()), absl::StrCat("1..", max_length)});
  }
  jobs::JobRecord job;
  auto& spec = job.spec;
  spec.model = in.model();
  spec.length = in.sequence_length();
  spec.samples = in.samples() == 0 ? 16 : in.samples();
  spec.target = in.has_target_position() ? in.target_position() : 0;
  spec.method = in.method() == v1::JACOBIAN_METHOD_HUTCHINSON ? "hutchinson" : "exact";
  spec.probes = in.probes() == 0 ? 64 : in.probes();
  spec.output = in.output() == v1::JACOBIAN_OUTPUT_LAYER_SWEEP ? "layer_sweep"
                : in.output() == v1::JACOBIAN_OUTPUT_LOG_PROB  ? "log_prob" : "final_hidden";
  spec.dtype = DtypeName(in.dtype());
  spec.keep_samples = in.return_raw_samples();
  spec.fit_effective_depth = in.fit_effective_depth();
  spec.seed = DrawSeed();
  if (in.input().has_given_tokens()) {
    spec.input = "given_tokens";
    for (const auto& sequence : in.input().given_tokens().sequences()) {
      std::vector<int64_t> ids(sequence.token_ids().begin(), sequence.token_ids().end());
      if (sequence.has_next_token_id()) ids.push_back(sequence.next_token_id());
      spec.tokens.push_back(std::move(ids));
    }
    spec.samples = static_cast<int64_t>(spec.tokens.size());
  } else if (in.input().has_gaussian_embeddings()) {
    spec.input = "gaussian_embeddings";
    const auto& gaussian = in.input().gaussian_embeddings();
    if (gaussian.has_seed()) spec.seed = gaussian.seed();
    if (gaussian.has_stddev()) spec.embedding_std = gaussian.stddev();
  } else if (in.input().random_tokens().has_seed()) {
    spec.seed = in.input().random_tokens().seed();
  }
  if (spec.samples < 1 || spec.samples > limits.max_samples) {
    return InvalidArgumentError({"INVALID_ARGUMENT", "spec.jacobian_norm.samples", std::to_string(spec.samples),
                                 absl::StrCat("1..", limits.max_samples)});
  }
  if (spec.method == "hutchinson" && spec.probes > limits.max_probes) {
    return InvalidArgumentError({"INVALID_ARGUMENT", "spec.jacobian_norm.probes", std::to_string(spec.probes),
                                 absl::StrCat("1..", limits.max_probes)});
  }
  if (spec.target > spec.length) {
    return InvalidArgumentError({"INVALID_POSITION", "spec.jacobian_norm.target_position", std::to_string(spec.target),
                                 absl::StrCat("1..", spec.length)});
  }
  const double needed = MinimumJobBytes(*model, spec.length);
  const double host = HostMemoryBytes();
  if (!limits.cuda_available && host > 0 && needed > host) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, "INSUFFICIENT_MEMORY",
                           absl::StrCat("the job needs at least ", static_cast<int64_t>(needed / (1 << 20)),
                                        " MiB (model and one layer's activations at L = ", spec.length,
                                        "), more than this server's ", static_cast<int64_t>(host / (1 << 20)), " MiB"));
  }
  const auto device = request.spec().device();
  spec.device = device == v1::DEVICE_CPU ? "cpu" : device == v1::DEVICE_CUDA ? "cuda" : "";
  if (spec.device == "cuda" && !limits.cuda_available) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "DEVICE_UNAVAILABLE",
                           "spec.device = DEVICE_CUDA but this server has no CUDA device");
  }
  if (spec.dtype == "float16" && !limits.cuda_available) {
    return InvalidArgumentError({"INVALID_ARGUMENT", "spec.jacobian_norm.dtype", "FLOAT16",
                                 "FLOAT32, BFLOAT16 or FLOAT64 (float16 needs a CUDA device)"});
  }
  if (request.spec().priority() < -100 || request.spec().priority() > 100) {
    return InvalidArgumentError({"INVALID_ARGUMENT", "spec.priority", std::to_string(request.spec().priority()), "-100..100"});
  }
  job.priority = request.spec().priority();
  job.time_limit_seconds = request.spec().has_time_limit()
                               ? TimeUtil::DurationToMilliseconds(request.spec().time_limit()) / 1000.0 : 0;
  job.labels.insert(request.labels().begin(), request.labels().end());
  job.request_id = request.request_id();
  return job;
}

void FillMetrics(const nlohmann::json& json, v1::JobFitMetrics* metrics) {
  metrics->set_spearman(json.value("spearman", 0.0));
  metrics->set_pearson_log(json.value("pearson_log", 0.0));
  metrics->set_rmse_log(json.value("rmse_log", 0.0));
  metrics->set_ks(json.value("ks", 0.0));
  metrics->set_wasserstein1(json.value("wasserstein1", 0.0));
  metrics->set_measured_last_weight(json.value("measured_last_weight", 0.0));
  metrics->set_model_last_weight(json.value("model_last_weight", 0.0));
  metrics->set_measured_floor(json.value("measured_floor", 0.0));
  metrics->set_model_floor(json.value("model_floor", 0.0));
  metrics->set_measured_last_jump(json.value("measured_last_jump", 0.0));
  metrics->set_model_last_jump(json.value("model_last_jump", 0.0));
}

// The report's theory (theory_report.cc) as the proto's comparison: one fit per model, at the
// model's depth (its ridge is that one depth) or, with `effective_depth`, over the depths the report
// tried (1..min(4 H, 64)) with the best one, its ridge and interval; and one curve per (model, alpha
// source) with the prediction at the page's positions (left empty with omit_theory).
void FillTheory(const nlohmann::json& theory, const std::vector<uint32_t>& positions, bool omit_profiles,
                bool effective_depth, v1::JobTheoryComparison* out) {
  out->set_quantity(v1::SQUARED_NORM);
  const uint32_t depth = theory.value("depth", 0u);
  auto model_of = [](const nlohmann::json& fit) {
    return fit.value("model", "") == "coherent" ? v1::COHERENT : v1::INCOHERENT;
  };
  auto add_curve = [&](v1::ProfileModel model, v1::TheoryAlphaSource source, const nlohmann::json& profile,
                       const nlohmann::json& metrics) {
    auto* curve = out->add_curves();
    curve->set_model(model);
    curve->set_alpha_source(source);
    FillMetrics(metrics, curve->mutable_metrics());
    if (omit_profiles) return curve;
    for (uint32_t position : positions) {
      curve->add_profile(position <= profile.size() ? profile[position - 1].get<double>() : 0.0);
    }
    return curve;
  };
  if (theory.contains("measured_alpha_schedule")) {
    const auto& measured = theory["measured_alpha_schedule"];
    for (auto [model, name] : {std::pair{v1::COHERENT, "coherent"}, std::pair{v1::INCOHERENT, "incoherent"}}) {
      auto* curve = add_curve(model, v1::THEORY_ALPHA_SOURCE_MEASURED, measured[std::string(name) + "_profile"],
                              measured[name]);
      auto* routing = curve->mutable_routing();
      routing->set_depth(static_cast<uint32_t>(measured["alpha"].size()));
      for (double alpha : measured["alpha"]) routing->mutable_alpha_schedule()->add_alpha(alpha);
    }
  }
  if (!theory.contains("fits")) {
    for (auto model : {v1::COHERENT, v1::INCOHERENT}) {
      auto* fit = out->add_fits();
      fit->set_model(model);
      fit->mutable_error()->set_reason(v1::INVALID_PROFILE);
      fit->mutable_error()->set_code(static_cast<int32_t>(absl::StatusCode::kInvalidArgument));
      fit->mutable_error()->set_message(theory.value("note", "no fit"));
    }
    return;
  }
  const bool ridge = effective_depth && theory.contains("effective_depth_fits");
  for (const auto& json : theory[ridge ? "effective_depth_fits" : "fits"]) {
    auto* fit = out->add_fits();
    fit->set_model(model_of(json));
    const double alpha = json.value("alpha", 0.0), lambda = json.value("lambda", 0.0);
    const uint32_t fit_depth = ridge ? json.value("depth", depth) : depth;
    fit->set_alpha(alpha);
    fit->set_lambda(lambda);
    // The ridge interval; lambda itself when the depth is fixed at the model's.
    fit->set_lambda_low(json.value("lambda_low", lambda));
    fit->set_lambda_high(json.value("lambda_high", lambda));
    fit->set_lambda_sample_low(json.value("lambda_sample_low", lambda));
    fit->set_lambda_sample_high(json.value("lambda_sample_high", lambda));
    const double rmse_log = json.contains("metrics") ? json["metrics"].value("rmse_log", 0.0) : 0.0;
    fit->set_rmse_log(rmse_log);
    if (ridge) {
      fit->set_effective_depth(fit_depth);
      for (const auto& point_json : json.value("ridge", nlohmann::json::array())) {
        auto* point = fit->add_ridge();
        point->set_depth(point_json.value("depth", 0u));
        point->set_alpha(point_json.value("alpha", 0.0));
        point->set_rmse_log(point_json.value("rmse_log", 0.0));
      }
    } else {
      auto* point = fit->add_ridge();
      point->set_depth(depth);
      point->set_alpha(alpha);
      point->set_rmse_log(rmse_log);
    }
    auto* curve = add_curve(fit->model(), v1::THEORY_ALPHA_SOURCE_FITTED, json.value("profile", nlohmann::json::array()),
                            json.value("metrics", nlohmann::json::object()));
    curve->mutable_routing()->set_depth(fit_depth);
    curve->mutable_routing()->set_alpha(alpha);
  }
}

// Fills one page of per-position statistics: positions first..last (1-based) every `stride`,
// `page_size` of them per page (default 1024, at most 16384); the token is the next index.
absl::Status ResultPage(const v1::GetJobResultRequest& request, const nlohmann::json& json,
                        v1::GetJobResultResponse* response) {
  response->set_id(request.id());
  auto* result = response->mutable_jacobian_norm();
  const auto& measurement = json["measurement"];
  const uint32_t length = measurement.value("target", measurement.value("length", 0u));
  result->set_sequence_length(measurement.value("length", 0u));
  result->set_target_position(measurement.value("target", 0u));
  result->set_samples(measurement.value("samples", 0u));
  result->set_num_layers(json["model"].value("layers", 0u));
  const uint32_t first = request.has_first_position() ? request.first_position() : 1;
  const uint32_t last = request.has_last_position() ? request.last_position() : length;
  if (first < 1 || last > length || first > last) {
    return InvalidArgumentError({"INVALID_POSITION", "first_position..last_position",
                                 absl::StrCat(first, "..", last), absl::StrCat("1 <= first <= last <= T = ", length)});
  }
  const uint32_t stride = std::max(1u, request.stride());
  const uint32_t page_size = request.page_size() == 0 ? 1024 : std::min(request.page_size(), 16384u);
  uint64_t index = 0;  // Index of the first selected position of this page.
  if (!request.page_token().empty()) {
    char* end = nullptr;
    index = std::strtoull(request.page_token().c_str(), &end, 10);
    if (end == request.page_token().c_str() || *end != '\0') {
      return InvalidArgumentError({"INVALID_ARGUMENT", "page_token", request.page_token(), "a token from the previous page"});
    }
  }
  const uint64_t selected = (last - first) / stride + 1;
  const uint64_t stop = std::min<uint64_t>(selected, index + page_size);
  auto* stats = result->mutable_profile()->mutable_stats();
  const std::pair<const char*, google::protobuf::RepeatedField<double>*> columns[] = {
      {"sq_norm_mean", stats->mutable_sq_norm_mean()}, {"sq_norm_std", stats->mutable_sq_norm_std()},
      {"sq_norm_stderr", stats->mutable_sq_norm_stderr()}, {"norm_mean", stats->mutable_norm_mean()},
      {"norm_std", stats->mutable_norm_std()}, {"norm_stderr", stats->mutable_norm_stderr()},
      {"sq_norm_estimator_stderr", stats->mutable_estimator_stderr()}};
  double total = 0;
  for (double value : json["sq_norm_mean"]) total += value;
  stats->set_sq_norm_total(total);
  for (uint64_t i = index; i < stop; ++i) {
    const uint32_t position = first + static_cast<uint32_t>(i) * stride;
    result->add_positions(position);
    for (const auto& [key, field] : columns) {
      if (json.contains(key)) field->Add(json[key][position - 1].get<double>());
    }
    stats->add_profile(total > 0 ? json["sq_norm_mean"][position - 1].get<double>() / total : 0);
  }
  if (json.contains("theory") && length >= 3) {
    const std::vector<uint32_t> positions(result->positions().begin(), result->positions().end());
    FillTheory(json["theory"], positions, request.omit_theory(), json["theory"].value("fit_effective_depth", false),
               result->mutable_profile()->mutable_theory());
  }
  // A layer sweep's profile per layer, on the same positions.
  if (json.contains("layers") && !request.omit_layer_profiles()) {
    for (const auto& layer : json["layers"]) {
      auto* profile = result->add_layer_profiles();
      profile->set_layer(layer.value("layer", 0u));
      for (uint64_t i = index; i < stop; ++i) {
        const uint32_t position = first + static_cast<uint32_t>(i) * stride;
        profile->mutable_stats()->add_sq_norm_mean(layer["sq_norm_mean"][position - 1].get<double>());
        profile->mutable_stats()->add_sq_norm_stderr(layer["sq_norm_stderr"][position - 1].get<double>());
      }
    }
  }
  // Per-layer branch ratios (attention weight of each layer, averaged over samples).
  if (json.contains("branch_ratio")) {
    uint32_t layer = 0;
    for (double ratio : json["branch_ratio"]) {
      auto* branch = result->add_branch_ratios();
      branch->set_layer(++layer);
      branch->set_attention_mean(ratio);
    }
  }
  // Per-sample values and token ids at this page's positions, for samples first..first+count-1.
  const uint32_t samples = measurement.value("samples", 0u);
  const uint32_t first_sample = request.first_sample();
  const uint32_t sample_end = request.sample_count() == 0 ? samples : std::min(samples, first_sample + request.sample_count());
  if (request.include_raw_samples()) {
    if (!json.contains("raw")) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "INVALID_ARGUMENT",
                             "the job was submitted without return_raw_samples: no per-sample values were kept");
    }
    for (uint32_t sample = first_sample; sample < sample_end; ++sample) {
      auto* raw = result->add_raw_samples();
      raw->set_sample(sample);
      for (uint64_t i = index; i < stop; ++i) {
        raw->add_sq_norm(json["raw"][sample][first + static_cast<uint32_t>(i) * stride - 1].get<double>());
      }
    }
  }
  if (request.include_token_ids() && json.contains("tokens")) {
    for (uint32_t sample = first_sample; sample < sample_end && sample < json["tokens"].size(); ++sample) {
      const auto& ids = json["tokens"][sample];
      auto* tokens = result->add_sample_tokens();
      tokens->set_sample(sample);
      for (uint64_t i = index; i < stop; ++i) {
        tokens->add_token_ids(ids[first + static_cast<uint32_t>(i) * stride - 1].get<uint32_t>());
      }
      if (ids.size() > length) tokens->set_next_token_id(ids[length].get<uint32_t>());
    }
  }
  if (stop < selected) response->set_next_page_token(std::to_string(stop));
  return absl::OkStatus();
}

}  // namespace

void JobToProto(const jobs::JobRecord& job, v1::Job* out) {
  out->set_id(job.id);
  auto* spec = out->mutable_spec()->mutable_jacobian_norm();
  spec->set_model(job.spec.model);
  spec->set_sequence_length(static_cast<uint32_t>(job.spec.length));
  spec->set_samples(static_cast<uint32_t>(job.spec.samples));
  if (job.spec.target > 0) spec->set_target_position(static_cast<uint32_t>(job.spec.target));
  spec->set_method(job.spec.method == "hutchinson" ? v1::JACOBIAN_METHOD_HUTCHINSON : v1::JACOBIAN_METHOD_EXACT);
  spec->set_probes(job.spec.method == "hutchinson" ? static_cast<uint32_t>(job.spec.probes) : 0);
  spec->set_output(job.spec.output == "layer_sweep" ? v1::JACOBIAN_OUTPUT_LAYER_SWEEP
                   : job.spec.output == "log_prob" ? v1::JACOBIAN_OUTPUT_LOG_PROB : v1::JACOBIAN_OUTPUT_FINAL_HIDDEN);
  spec->set_dtype(DtypeToProto(job.spec.dtype));
  spec->set_return_raw_samples(job.spec.keep_samples);
  if (job.spec.input == "gaussian_embeddings") {
    spec->mutable_input()->mutable_gaussian_embeddings()->set_seed(job.spec.seed);
    spec->mutable_input()->mutable_gaussian_embeddings()->set_stddev(job.spec.embedding_std);
  } else if (job.spec.input == "given_tokens") {
    spec->mutable_input()->mutable_given_tokens()->set_sequence_count(static_cast<uint32_t>(job.spec.tokens.size()));
  } else {
    spec->mutable_input()->mutable_random_tokens()->set_seed(job.spec.seed);
  }
  out->mutable_spec()->set_priority(job.priority);
  out->mutable_spec()->set_device(job.spec.device == "cpu" ? v1::DEVICE_CPU
                                  : job.spec.device == "cuda" ? v1::DEVICE_CUDA : v1::DEVICE_PREFERENCE_UNSPECIFIED);
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
  out->set_request_id(job.request_id);
}

absl::StatusOr<v1::Job> JobServiceImpl::Submit(const v1::SubmitJobRequest& request) {
  if (shutting_down_) return ErrorWithReason(absl::StatusCode::kUnavailable, "SHUTTING_DOWN", "the server is shutting down");
  auto record = RecordFromRequest(request, *registry_, limits_);
  if (!record.ok()) return record.status();
  auto created = store_->Create(*record, limits_.max_queued);
  if (!created.ok()) return created.status();
  if (created->created && pool_ != nullptr) pool_->Wake();
  if (created->created && metrics_ != nullptr) metrics_->JobSubmitted();
  v1::Job job;
  JobToProto(created->job, &job);
  return job;
}

absl::StatusOr<v1::Job> JobServiceImpl::Cancel(const std::string& id) {
  auto job = store_->Get(id);
  if (!job.ok()) return job.status();
  if (jobs::IsTerminal(job->state) || job->state == jobs::JobState::kCancelling) {
    v1::Job out;
    JobToProto(*job, &out);
    return out;  // Cancelling is idempotent.
  }
  auto moved = store_->Transition(id, job->state == jobs::JobState::kQueued ? jobs::JobState::kCancelled
                                                                            : jobs::JobState::kCancelling, {});
  if (!moved.ok()) return moved.status();
  v1::Job out;
  JobToProto(*moved, &out);
  return out;
}

grpc::Status JobServiceImpl::SubmitJob(grpc::ServerContext* context, const v1::SubmitJobRequest* request, v1::Job* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "SubmitJob");
  auto job = Submit(*request);
  if (job.ok()) *response = *job;
  return scope.Finish(job.status(), context);
}

grpc::Status JobServiceImpl::GetJob(grpc::ServerContext* context, const v1::GetJobRequest* request, v1::Job* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "GetJob");
  auto job = store_->Get(request->id());
  if (job.ok()) {
    JobToProto(*job, response);
    if (job->state == jobs::JobState::kQueued) response->set_queue_position(QueuePosition(*job));
  }
  return scope.Finish(job.status(), context);
}

uint32_t JobServiceImpl::QueuePosition(const jobs::JobRecord& job) {
  // 0 = next to run: queued jobs that run before it (higher priority, or equal and older).
  jobs::ListFilter filter;
  filter.states = {jobs::JobState::kQueued};
  filter.page_size = 1000;
  uint32_t ahead = 0;
  do {
    auto page = store_->List(filter);
    if (!page.ok()) break;
    for (const auto& other : page->jobs) {
      if (other.id == job.id) continue;
      ahead += other.priority > job.priority ||
               (other.priority == job.priority && (other.created_ms < job.created_ms ||
                                                   (other.created_ms == job.created_ms && other.id < job.id)));
    }
    filter.page_token = page->next_page_token;
  } while (!filter.page_token.empty());
  return ahead;
}

grpc::Status JobServiceImpl::ListJobs(grpc::ServerContext* context, const v1::ListJobsRequest* request,
                                      v1::ListJobsResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "ListJobs");
  jobs::ListFilter filter;
  for (int state : request->states()) filter.states.push_back(static_cast<jobs::JobState>(state));
  filter.model = request->model();
  if (const auto& selector = request->label_selector(); !selector.empty()) {
    const auto equals = selector.find('=');
    filter.labels[selector.substr(0, equals)] = equals == std::string::npos ? "" : selector.substr(equals + 1);
  }
  filter.page_size = static_cast<int32_t>(request->page_size());
  filter.page_token = request->page_token();
  auto page = store_->List(filter);
  if (page.ok()) {
    for (const auto& job : page->jobs) JobToProto(job, response->add_jobs());
    response->set_next_page_token(page->next_page_token);
  }
  return scope.Finish(page.status(), context);
}

grpc::Status JobServiceImpl::CancelJob(grpc::ServerContext* context, const v1::CancelJobRequest* request, v1::Job* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "CancelJob");
  auto job = Cancel(request->id());
  if (job.ok()) *response = *job;
  return scope.Finish(job.status(), context);
}

grpc::Status JobServiceImpl::DeleteJob(grpc::ServerContext* context, const v1::DeleteJobRequest* request,
                                       v1::DeleteJobResponse*) {
  RpcScope scope(metrics_, std::string(kPrefix) + "DeleteJob");
  return scope.Finish(store_->Delete(request->id(), request->force()), context);
}

grpc::Status JobServiceImpl::WatchJob(grpc::ServerContext* context, const v1::WatchJobRequest* request,
                                      grpc::ServerWriter<v1::WatchJobResponse>* writer) {
  RpcScope scope(metrics_, std::string(kPrefix) + "WatchJob");
  int64_t last_update = -1;
  jobs::JobState last_state = jobs::JobState::kQueued;
  while (!context->IsCancelled() && !shutting_down_) {
    auto job = store_->Get(request->id());
    if (!job.ok()) return scope.Finish(job.status(), context);
    if (job->updated_ms != last_update || job->state != last_state || last_update < 0) {
      v1::WatchJobResponse message;
      JobToProto(*job, message.mutable_job());
      if (!writer->Write(message)) break;
      last_update = job->updated_ms;
      last_state = job->state;
    }
    if (jobs::IsTerminal(job->state)) return scope.Finish(absl::OkStatus(), context);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return scope.Finish(shutting_down_ ? ErrorWithReason(absl::StatusCode::kUnavailable, "SHUTTING_DOWN",
                                                       "the server is shutting down; watch again after it restarts")
                                     : absl::CancelledError("watch cancelled"), context);
}

grpc::Status JobServiceImpl::GetJobResult(grpc::ServerContext* context, const v1::GetJobResultRequest* request,
                                          v1::GetJobResultResponse* response) {
  RpcScope scope(metrics_, std::string(kPrefix) + "GetJobResult");
  auto text = store_->GetResult(request->id());
  if (!text.ok()) return scope.Finish(text.status(), context);
  const auto json = nlohmann::json::parse(*text, nullptr, false);
  if (json.is_discarded()) {
    return scope.Finish(ErrorWithReason(absl::StatusCode::kDataLoss, "INTERNAL_ERROR", "stored result is not JSON"), context);
  }
  auto page = ResultPage(*request, json, response);
  if (!page.ok()) return scope.Finish(page, context);
  if (request->page_token().empty()) response->set_report_json(*text);  // First page only.
  return scope.Finish(absl::OkStatus(), context);
}

}  // namespace posbias::service
