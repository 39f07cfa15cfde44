#include "server/admission/job_admission.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/naming/client_names.h"
#include "server/jacobian/batch_plan.h"
#include "server/models/config.h"
#include "server/status/error.h"

namespace posbias::admission {
namespace {

constexpr char kSpec[] = "spec.jacobian_norm.";
constexpr double kMaxStddev = 1000;

absl::Status Invalid(ErrorReason reason, const std::string& field, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({reason, absl::StrCat(kSpec, field), value, allowed});
}

absl::Status CheckShape(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model, const JobLimits& limits) {
  const int64_t max_length = std::min<int64_t>(limits.max_sequence_length, model.config.max_positions);
  if (spec.length < 1 || spec.length > max_length) {
    const std::string allowed =
        max_length < limits.max_sequence_length
            ? absl::StrCat("1..", max_length, " positions (the model's max_positions)")
            : limits::Range(limits::Limit::kMaxSequenceLength, 1, static_cast<double>(max_length));
    return Invalid(ErrorReason::kInvalidLength, "sequence_length", std::to_string(spec.length), allowed);
  }
  if (spec.samples < 1 || spec.samples > limits.max_samples) {
    return Invalid(ErrorReason::kInvalidArgument, "samples", std::to_string(spec.samples),
                   limits::Range(limits::Limit::kMaxSamples, 1, static_cast<double>(limits.max_samples)));
  }
  if (spec.method == jobs::JacobianMethod::kHutchinson && (spec.probes < 1 || spec.probes > limits.max_probes)) {
    return Invalid(ErrorReason::kInvalidArgument, "probes", std::to_string(spec.probes),
                   limits::Range(limits::Limit::kMaxProbes, 1, static_cast<double>(limits.max_probes)));
  }
  if (spec.target > spec.length) {
    return Invalid(ErrorReason::kInvalidPosition, "target_position", std::to_string(spec.target),
                   absl::StrCat("1..", spec.length));
  }
  if (spec.output == jobs::JacobianOutput::kLayerSweep && model.config.family == models::Family::kTorchScript) {
    return Invalid(ErrorReason::kInvalidArgument, "output", "JACOBIAN_OUTPUT_LAYER_SWEEP",
                   "FINAL_HIDDEN or LOG_PROB (a TorchScript model shows no layers)");
  }
  if ((spec.pathway != jobs::Pathway::kFull || spec.compare_pathways) &&
      model.config.family == models::Family::kTorchScript) {
    return Invalid(ErrorReason::kInvalidArgument, "pathway", std::string(jobs::PathwayName(spec.pathway)),
                   "FULL without compare_pathways (a TorchScript model's attention cannot be split)");
  }
  return absl::OkStatus();
}

// Given tokens: exactly L ids per sequence (plus the next token where LOG_PROB at T = L needs
// one, and only there), each id within the vocabulary.
absl::Status CheckTokens(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model) {
  const bool needs_next = jobs::NeedsNextToken(spec);
  const auto wanted = static_cast<size_t>(spec.length + (needs_next ? 1 : 0));
  const int64_t vocab = model.config.vocab_size;
  for (size_t s = 0; s < spec.tokens.size(); ++s) {
    const auto& ids = spec.tokens[s];
    const std::string field = absl::StrCat("input.given_tokens.sequences[", s, "]");
    if (ids.size() != wanted) {
      return Invalid(ErrorReason::kInvalidArgument, field, absl::StrCat(ids.size(), " ids"),
                     needs_next ? absl::StrCat(spec.length, " token ids and a next_token_id (LOG_PROB at T = L)")
                                : absl::StrCat("exactly L = ", spec.length, " token ids and no next_token_id"));
    }
    for (size_t j = 0; j < ids.size(); ++j) {
      if (ids[j] < 0 || ids[j] >= vocab) {
        return Invalid(ErrorReason::kInvalidArgument, absl::StrCat(field, ".token_ids[", j, "]"), std::to_string(ids[j]),
                       absl::StrCat("0..", vocab - 1, " (the model's vocabulary)"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInput(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model) {
  if (spec.input == jobs::JacobianInput::kGaussianEmbeddings &&
      !(std::isfinite(spec.embedding_std) && spec.embedding_std > 0 && spec.embedding_std <= kMaxStddev)) {
    return Invalid(ErrorReason::kInvalidArgument, "input.gaussian_embeddings.stddev", FormatValue(spec.embedding_std),
                   "a finite number in (0, 1000]");
  }
  if (spec.input == jobs::JacobianInput::kGivenTokens) return CheckTokens(spec, model);
  return absl::OkStatus();
}

// The scalar outputs (LOG_PROB, LOSS_GRADIENT) are measured exactly, from a model with an output
// head; the loss gradient also needs every position's next token and has no target of its own.
absl::Status CheckOutput(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model) {
  if (!jobs::IsScalarOutput(spec.output)) return absl::OkStatus();
  const std::string output = spec.output == jobs::JacobianOutput::kLogProb ? "JACOBIAN_OUTPUT_LOG_PROB"
                                                                           : "JACOBIAN_OUTPUT_LOSS_GRADIENT";
  if (spec.method == jobs::JacobianMethod::kHutchinson) {
    return Invalid(ErrorReason::kInvalidArgument, "method", "JACOBIAN_METHOD_HUTCHINSON",
                   absl::StrCat("EXACT with ", output, " (a scalar output: its exact norm is one VJP per sample)"));
  }
  if (model.config.family == models::Family::kTorchScript) {
    return Invalid(ErrorReason::kInvalidArgument, "output", output,
                   "FINAL_HIDDEN (a TorchScript model has no output head)");
  }
  if (spec.output != jobs::JacobianOutput::kLossGradient) return absl::OkStatus();
  if (spec.input == jobs::JacobianInput::kGaussianEmbeddings) {
    return Invalid(ErrorReason::kInvalidArgument, "input", "gaussian_embeddings",
                   "random_tokens, given_tokens or text with LOSS_GRADIENT (its loss scores each next token)");
  }
  if (spec.target != 0 && spec.target != spec.length) {
    return Invalid(ErrorReason::kInvalidPosition, "target_position", std::to_string(spec.target),
                   absl::StrCat("unset or L = ", spec.length, " with LOSS_GRADIENT (the loss sums over all positions)"));
  }
  if (spec.pathway != jobs::Pathway::kFull || spec.compare_pathways) {
    return Invalid(ErrorReason::kInvalidArgument, spec.compare_pathways ? "compare_pathways" : "pathway",
                   spec.compare_pathways ? "true" : std::string(jobs::PathwayName(spec.pathway)),
                   "FULL without compare_pathways with LOSS_GRADIENT");
  }
  return absl::OkStatus();
}

absl::Status CheckScheduling(jobs::JobRecord& job, const JobLimits& limits) {
  if (job.priority < -100 || job.priority > 100) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.priority", std::to_string(job.priority), "-100..100"});
  }
  if (job.time_limit_seconds == 0) job.time_limit_seconds = limits.default_time_limit_seconds;
  if (!(job.time_limit_seconds >= 1 && job.time_limit_seconds <= limits.max_time_limit_seconds)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "spec.time_limit",
                                 absl::StrCat(FormatValue(job.time_limit_seconds), " s"),
                                 limits::Range(limits::Limit::kMaxJobTimeLimit, 1, limits.max_time_limit_seconds)});
  }
  if (auto status = naming::CheckLabels(job.labels); !status.ok()) return status;
  return naming::CheckRequestId(job.request_id);
}

// Values kept per sample and position: the squared norms of every output (and the probe variances
// for Hutchinson's estimate).
double RecordValues(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model) {
  const double outputs = spec.output == jobs::JacobianOutput::kLayerSweep ? std::max<int64_t>(1, model.config.num_layers) : 1;
  const double per_output = spec.method == jobs::JacobianMethod::kHutchinson ? 2 : 1;
  return static_cast<double>(spec.samples) * static_cast<double>(spec.length) * outputs * per_output;
}

absl::Status CheckDevice(const jobs::JacobianJobSpec& spec, const JobLimits& limits) {
  if (spec.device == jobs::DevicePreference::kCuda && !limits.cuda_available) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kDeviceUnavailable,
                           "spec.device = DEVICE_CUDA but this server has no CUDA device");
  }
  if (spec.dtype == jobs::ComputeDtype::kFloat16 && !limits.cuda_available) {
    return Invalid(ErrorReason::kInvalidArgument, "dtype", "FLOAT16",
                   "FLOAT32, BFLOAT16 or FLOAT64 (float16 needs a CUDA device)");
  }
  return absl::OkStatus();
}

}  // namespace

double MinimumJobBytes(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model) {
  const auto& c = model.config;
  // A model not loaded yet (a built-in preset): its float32 parameters from the config, the
  // embeddings included (a 128k vocabulary is a quarter of Llama 3.2 1B); TorchScript (no
  // formula) by the blocks' 12 H d^2.
  const double estimated = 4.0 * models::EstimatedParameters(c);
  const double parameters = model.memory_bytes > 0 ? static_cast<double>(model.memory_bytes)
                            : estimated > 0        ? estimated
                                                   : 4.0 * 12 * c.num_layers * c.hidden_size * c.hidden_size;
  // The measurement at its smallest, as the engine would plan it with almost no memory (layers
  // recomputed, one cotangent row per product and call), by the batch plan's own memory model.
  jacobian::BatchPlanInputs least;
  least.config = c;
  least.length = spec.length;
  least.element_bytes = spec.dtype == jobs::ComputeDtype::kFloat64 ? 8 : spec.dtype == jobs::ComputeDtype::kFloat32 ? 4 : 2;
  least.norm_element_bytes = spec.dtype == jobs::ComputeDtype::kFloat64 ? 8 : 4;
  least.rows_total = 1;
  least.budget_bytes = 1;
  least.model_pass = models::HasOwnReversePass(c.family);
  least.loss_over_positions = spec.output == jobs::JacobianOutput::kLossGradient;
  least.on_cuda = spec.device == jobs::DevicePreference::kCuda;
  const double measurement = static_cast<double>(jacobian::PredictMemory(least, jacobian::PlanBatches(least), 0).total());
  // Each kept value: 8 bytes in memory, about 24 more as checkpoint text, 8 more when raw.
  const double samples = RecordValues(spec, model) * (32.0 + (spec.keep_samples ? 8.0 : 0.0));
  return parameters + measurement + samples;
}

absl::Status AdmitJob(jobs::JobRecord& job, const registry::ModelEntry& model, const JobLimits& limits,
                      double host_memory_bytes) {
  const auto& spec = job.spec;
  if (auto status = CheckScheduling(job, limits); !status.ok()) return status;
  if (model.state == registry::ModelState::kFailed) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelNotReady,
                           absl::StrCat("model ", model.name, " failed to load: ", model.error_message));
  }
  if (auto status = CheckShape(spec, model, limits); !status.ok()) return status;
  if (auto status = CheckOutput(spec, model); !status.ok()) return status;
  if (auto status = CheckInput(spec, model); !status.ok()) return status;
  if (spec.keep_samples && RecordValues(spec, model) > static_cast<double>(limits.max_raw_values)) {
    return TooLargeError(absl::StrCat(kSpec, "return_raw_samples"), FormatValue(RecordValues(spec, model)) + " values",
                         absl::StrCat(limits::Allowed(limits::Limit::kMaxRawValues, static_cast<double>(limits.max_raw_values)),
                                      " kept (samples x T x outputs)"));
  }
  const double needed = MinimumJobBytes(spec, model);
  if (!limits.cuda_available && host_memory_bytes > 0 && needed > host_memory_bytes) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           absl::StrCat("the job needs at least ", static_cast<int64_t>(needed / (1 << 20)),
                                        " MiB (model, the measurement at its smallest plan at L = ", spec.length, " and ",
                                        spec.samples, " samples' records), more than this server's ",
                                        static_cast<int64_t>(host_memory_bytes / (1 << 20)), " MiB"));
  }
  return CheckDevice(spec, limits);
}

}  // namespace posbias::admission
