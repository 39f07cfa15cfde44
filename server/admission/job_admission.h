// Admission of a Jacobian-norm job: whether this service takes a (typed) job on the registered
// model it names, before it enters the queue. One place for the job limits and the memory estimate
// (the engine's own memory model, jacobian::PredictMemory, for the job's smallest plan).
// Torch-free and gRPC-free: the service converts the request (api/job_convert) and asks here.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/limits/limits.h"
#include "server/jobs/job.h"
#include "server/registry/model_entry.h"

namespace posbias::admission {

struct JobLimits {
  // Defaults from the limits table (limits/limits.h).
  int64_t max_queued = limits::Default<int64_t>(limits::Limit::kMaxQueued);  // Jobs waiting in QUEUED.
  // Fraction of max_queued one tenant's QUEUED jobs may be (at least one job).
  double tenant_share = limits::Default<double>(limits::Limit::kTenantShare);
  // Largest L (also at most the model's positions).
  int64_t max_sequence_length = limits::Default<int64_t>(limits::Limit::kMaxSequenceLength);
  int64_t max_samples = limits::Default<int64_t>(limits::Limit::kMaxSamples);
  int64_t max_probes = limits::Default<int64_t>(limits::Limit::kMaxProbes);
  // A job that names no time limit gets this; the largest a job may name.
  double default_time_limit_seconds = limits::Default<double>(limits::Limit::kJobTimeLimit);
  double max_time_limit_seconds = limits::Default<double>(limits::Limit::kMaxJobTimeLimit);
  // Kept per-sample values (return_raw_samples).
  int64_t max_raw_values = limits::Default<int64_t>(limits::Limit::kMaxRawValues);
  // Whether a CUDA worker can take the job (a local CUDA device, or a shared store whose workers
  // are other processes).
  bool cuda_available = false;
};

// Bytes a job needs at least: the float32 parameters, the measurement as the engine would plan it
// with almost no memory (jacobian::PredictMemory of PlanBatches with layers recomputed and one
// cotangent row: every layer's input, one layer's saved tensors, one row's reverse work; for
// autograd models one layer's activations, attention scores included), and what the samples
// leave behind: their per-position records (in memory and as the checkpoint's JSON text) and the
// kept raw values.
double MinimumJobBytes(const jobs::JacobianJobSpec& spec, const registry::ModelEntry& model);

// OK, or the first reason the job is refused, before anything is allocated for it: labels or
// request_id malformed; the model failed (MODEL_NOT_READY); L, samples, probes, target, priority or
// time limit out of range (INVALID_LENGTH, INVALID_ARGUMENT, INVALID_POSITION); a Gaussian stddev
// not finite in (0, 1000]; given tokens of the wrong count or outside the vocabulary; an output
// the model does not have (LAYER_SWEEP of a TorchScript model); too many raw values
// (REQUEST_TOO_LARGE); more memory than the host has (INSUFFICIENT_MEMORY); CUDA or float16
// without a CUDA worker (DEVICE_UNAVAILABLE, INVALID_ARGUMENT). Fills the server's default time
// limit. `host_memory_bytes` <= 0: unknown, not checked.
absl::Status AdmitJob(jobs::JobRecord& job, const registry::ModelEntry& model, const JobLimits& limits,
                      double host_memory_bytes);

}  // namespace posbias::admission
