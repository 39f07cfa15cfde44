// Jobs: the lifecycle of an asynchronous measurement, in plain C++ (no gRPC, no torch).
//
// State machine (mirrors posbias.v1.JobState; see job_service.proto for the public description):
//   QUEUED      entered on submission and when a running job is re-queued (shutdown drain, crash
//               recovery at start-up). A reader may rely on: no worker holds the job.
//   RUNNING     a worker claimed it (attempt + 1); progress and checkpoint advance chunk by chunk.
//   CANCELLING  cancel was asked while running; the worker stops at its next chunk boundary.
//   SUCCEEDED   terminal; the result is stored.           FAILED  terminal; error set.
//   CANCELLED   terminal; no result.
// Allowed: QUEUED -> RUNNING | CANCELLED; RUNNING -> SUCCEEDED | FAILED | CANCELLING | QUEUED;
//          CANCELLING -> CANCELLED | SUCCEEDED | FAILED | QUEUED (re-queue keeps the cancel: it
//          becomes CANCELLED at recovery). Terminal states never change.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/jobs/jacobian_spec.h"
#include "server/limits/limits.h"

namespace posbias::jobs {

// How many times a job's attempt may be lost (its worker crashed, was killed, or lost its lease)
// before the job fails with reason ATTEMPTS_EXHAUSTED instead of running again: a job that takes
// its worker down must not take down the next one. Graceful re-queues (a drain) do not count.
// The limits table's default (--max-lost-attempts, limits.h): the stores' and the server's.
inline constexpr int kDefaultMaxLostAttempts = limits::Default<int>(limits::Limit::kMaxLostAttempts);

enum class JobState { kQueued = 10, kRunning = 20, kCancelling = 30, kSucceeded = 40, kFailed = 50, kCancelled = 60 };

bool IsTerminal(JobState state);
bool IsAllowedTransition(JobState from, JobState to);
// Where a cancel moves an active job: QUEUED ends CANCELLED at once; RUNNING becomes CANCELLING
// (its worker stops it). Only for QUEUED and RUNNING; the others have nothing left to cancel.
JobState StateAfterCancel(JobState from);
// "queued", "running", "cancelling", "succeeded", "failed", "cancelled".
std::string JobStateName(JobState state);
absl::StatusOr<JobState> ParseJobState(const std::string& name);

struct JobRecord {
  std::string id;                 // Server-assigned, e.g. "j-0f3a9c1b2d4e5f60718293a4" (96 random bits).
  std::string request_id;         // Client idempotency key ("" = none).
  JacobianJobSpec spec;
  // Which workers may claim the job: "" = any, else one device kind of a worker ("cpu", "cuda").
  // The queue's partition, set at submission from spec.device (DeviceName).
  std::string worker_kind;
  int32_t priority = 0;           // -100..100, higher runs first; then first in, first out.
  std::map<std::string, std::string> labels;
  double time_limit_seconds = 0;  // 0 = none; counts run_ms, summed over attempts.
  int64_t run_ms = 0;             // Time spent RUNNING or CANCELLING so far, all attempts together.
  // Who owns it: the tenant (only its principals see the job; "" = the default tenant) and the
  // principal that submitted it, whose max_running_jobs (0 = no limit) workers respect when they
  // claim: a job waits QUEUED while its owner has that many RUNNING or CANCELLING.
  std::string tenant;
  std::string owner;
  int32_t max_running = 0;
  JobState state = JobState::kQueued;
  int32_t attempt = 0;            // Incremented on every claim.
  double progress = 0;            // [0, 1].
  int64_t samples_done = 0;
  int64_t chunks_done = 0;
  int64_t chunks_total = 0;
  double eta_seconds = -1;        // < 0 = unknown.
  std::string device;             // Where it runs / ran.
  std::string worker;             // The worker holding it while RUNNING / CANCELLING.
  std::string error_reason;       // FAILED: an ErrorReason name.
  std::string error_message;
  int32_t error_code = 0;         // FAILED: the gRPC status code number.
  int64_t created_ms = 0, started_ms = 0, finished_ms = 0, updated_ms = 0;  // Unix epoch ms.
  std::string checkpoint;         // Opaque JSON written by the runner: work finished so far.
  // Parts (shared store with a part size, jobs with more units of work than that): each part is
  // a job of its own (id "<parent>.<k>", hidden from listings) whose worker measures units
  // [unit_begin, unit_end) of the parent's spec: its (model, sample) pairs, model-major
  // (jacobian_spec.h WorkUnits; one unit per sample without versus). Parts run on any workers in
  // parallel. The parent is RUNNING while its parts run and is claimed once they all succeeded, to
  // merge them: part_results then holds their results in unit order. (The store's columns keep
  // their first names, sample_begin / sample_end: a job without versus has units = samples.)
  std::string parent_id;          // Set on a part.
  int64_t unit_begin = 0, unit_end = 0;  // A part's units.
  int32_t parts_total = 0;        // Set on a parent.
  std::vector<std::string> part_results;
};

}  // namespace posbias::jobs
