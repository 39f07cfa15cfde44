// Admission of a Jacobian-norm job: whether this service takes a (typed) job on the registered
// model it names, before it enters the queue. One place for the job limits and the memory estimate
// (built on models::ActivationElementsPerLayer, the formula the engine's batch plan uses too).
// Torch-free and gRPC-free: the service converts the request (service/job_convert) and asks here.
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "server/jobs/job.h"
#include "server/registry/model_entry.h"

namespace posbias::admission {

struct JobLimits {
  int64_t max_queued = 1000;             // Jobs waiting in QUEUED.
  int64_t max_sequence_length = 131072;  // Largest L (also at most the model's positions).
  int64_t max_samples = 65536;
  int64_t max_probes = 4096;
  // Whether a CUDA worker can take the job (a local CUDA device, or a shared store whose workers
  // are other processes).
  bool cuda_available = false;
};

// Bytes a job needs at least, with activation checkpointing: the float32 parameters, every layer's
// input for one row, and one layer's activations (attention scores dominate at long L).
double MinimumJobBytes(const registry::ModelEntry& model, int64_t length);

// OK, or the first reason the job is refused: the model failed (MODEL_NOT_READY); L, samples,
// probes, target or priority out of range (INVALID_LENGTH, INVALID_ARGUMENT, INVALID_POSITION);
// more memory than the host has (INSUFFICIENT_MEMORY); CUDA or float16 without a CUDA worker
// (DEVICE_UNAVAILABLE, INVALID_ARGUMENT). `host_memory_bytes` <= 0: unknown, not checked.
absl::Status AdmitJob(const jobs::JobRecord& job, const registry::ModelEntry& model, const JobLimits& limits,
                      double host_memory_bytes);

}  // namespace posbias::admission
