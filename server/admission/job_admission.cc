#include "server/admission/job_admission.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"
#include "server/models/config.h"
#include "server/status/error.h"

namespace posbias::admission {
namespace {

constexpr char kSpec[] = "spec.jacobian_norm.";

absl::Status CheckShape(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model, const JobLimits& limits) {
  const int64_t max_length = std::min<int64_t>(limits.max_sequence_length, model.config.max_positions);
  if (spec.length < 1 || spec.length > max_length) {
    return InvalidArgumentError({ErrorReason::kInvalidLength, absl::StrCat(kSpec, "sequence_length"),
                                 std::to_string(spec.length), absl::StrCat("1..", max_length)});
  }
  if (spec.samples < 1 || spec.samples > limits.max_samples) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat(kSpec, "samples"),
                                 std::to_string(spec.samples), absl::StrCat("1..", limits.max_samples)});
  }
  if (spec.method == jobs::JacobianMethod::kHutchinson && spec.probes > limits.max_probes) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat(kSpec, "probes"),
                                 std::to_string(spec.probes), absl::StrCat("1..", limits.max_probes)});
  }
  if (spec.target > spec.length) {
    return InvalidArgumentError({ErrorReason::kInvalidPosition, absl::StrCat(kSpec, "target_position"),
                                 std::to_string(spec.target), absl::StrCat("1..", spec.length)});
  }
  return absl::OkStatus();
}

absl::Status CheckDevice(const jobs::JacobianJobSpec& spec, const JobLimits& limits) {
  if (spec.device == jobs::DevicePreference::kCuda && !limits.cuda_available) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kDeviceUnavailable,
                           "spec.device = DEVICE_CUDA but this server has no CUDA device");
  }
  if (spec.dtype == jobs::ComputeDtype::kFloat16 && !limits.cuda_available) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, absl::StrCat(kSpec, "dtype"), "FLOAT16",
                                 "FLOAT32, BFLOAT16 or FLOAT64 (float16 needs a CUDA device)"});
  }
  return absl::OkStatus();
}

}  // namespace

double MinimumJobBytes(const registry::ModelEntry& model, int64_t length) {
  const auto& c = model.config;
  const double parameters = model.memory_bytes > 0 ? static_cast<double>(model.memory_bytes)
                                                   : 4.0 * 12 * c.num_layers * c.hidden_size * c.hidden_size;
  const double inputs = 4.0 * static_cast<double>(length) * static_cast<double>(c.hidden_size) *
                        static_cast<double>(c.num_layers + 1);
  const double layer = 4.0 * models::ActivationElementsPerLayer(c, length);
  return parameters + inputs + layer;
}

absl::Status AdmitJob(const jobs::JobRecord& job, const registry::ModelEntry& model, const JobLimits& limits,
                      double host_memory_bytes) {
  const auto& spec = job.spec;
  if (model.state == registry::ModelState::kFailed) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelNotReady,
                           absl::StrCat("model ", model.name, " failed to load: ", model.error_message));
  }
  if (auto status = CheckShape(spec, model, limits); !status.ok()) return status;
  const double needed = MinimumJobBytes(model, spec.length);
  if (!limits.cuda_available && host_memory_bytes > 0 && needed > host_memory_bytes) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           absl::StrCat("the job needs at least ", static_cast<int64_t>(needed / (1 << 20)),
                                        " MiB (model and one layer's activations at L = ", spec.length,
                                        "), more than this server's ",
                                        static_cast<int64_t>(host_memory_bytes / (1 << 20)), " MiB"));
  }
  if (auto status = CheckDevice(spec, limits); !status.ok()) return status;
  if (job.priority < -100 || job.priority > 100) {
    return InvalidArgumentError(
        {ErrorReason::kInvalidArgument, "spec.priority", std::to_string(job.priority), "-100..100"});
  }
  return absl::OkStatus();
}

}  // namespace posbias::admission
