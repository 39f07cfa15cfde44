// What the job stores share: the column list of a job row, reading a row into a JobRecord, the
// store's error statuses, page tokens and job ids. Internal to the jobs room (not installed).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "server/jobs/job.h"

namespace posbias::jobs::internal {

// The error a job gets when its attempts were lost too often (both stores write it in SQL).
inline constexpr char kAttemptsExhaustedMessage[] =
    "the job's attempts were lost too often (its worker crashed, was killed or lost its lease while "
    "running it), so it is not run again";
inline constexpr int kAttemptsExhaustedCode = 10;  // ABORTED.

// The columns of a job row, in the order ReadRecord expects them.
inline constexpr char kColumns[] =
    "id, request_id, spec_json, priority, labels_json, time_limit_seconds, state, attempt, progress, "
    "samples_done, chunks_done, chunks_total, eta_seconds, device, worker, error_reason, "
    "error_message, error_code, created_ms, started_ms, finished_ms, updated_ms, checkpoint, spec_device, run_ms, tenant, owner, max_running";
inline constexpr int kColumnCount = 28;

// One versioned schema step (each store keeps its own append-only list).
struct Migration {
  int64_t version;
  const char* sql;
};

// FAILED_PRECONDITION when the stored schema `version` is newer than the `latest` this server knows.
absl::Status CheckSchemaVersion(int64_t version, int64_t latest);

absl::Status InternalError(const std::string& message);
absl::Status NotFound(const std::string& id);
// ABORTED: a newer attempt owns the job (the fencing check failed).
absl::Status NotCurrent(const std::string& id, int32_t attempt);
// FAILED_PRECONDITION (JOB_NOT_FINISHED): the transition from -> to is not allowed.
absl::Status Refused(const std::string& id, JobState from, JobState to);
absl::Status QueueFull(int64_t queued, int64_t max_queued);
absl::Status QuotaExceeded(const std::string& owner, int64_t queued, int64_t quota);
absl::Status NoResult(const std::string& id, JobState state);
absl::Status StillActive(const std::string& id, JobState state);

std::string SpecJson(const JacobianJobSpec& spec);
std::string LabelsJson(const std::map<std::string, std::string>& labels);

// Page tokens: "<created_ms>/<id>" as lowercase base-16 text (opaque to clients).
std::string EncodePageToken(int64_t created_ms, const std::string& id);
absl::StatusOr<std::pair<int64_t, std::string>> DecodePageToken(const std::string& token);

// Job ids: "j-" + 24 hex digits, 96 bits from the OS CSPRNG (getrandom), never reused in practice
// and not guessable from earlier ids.
inline constexpr int kJobIdRandomBits = 96;
std::string RandomJobId();

// The text columns of a row as read by a backend; numbers are parsed by the backend's accessors.
// Row must provide Text(i), Int(i) and Double(i) for the columns of kColumns.
absl::StatusOr<JobRecord> RecordFromFields(const std::string& id, const std::string& spec_json,
                                           const std::string& labels_json, const std::string& state);

template <typename Row>
absl::StatusOr<JobRecord> ReadRecord(const Row& row) {
  absl::StatusOr<JobRecord> parsed = RecordFromFields(row.Text(0), row.Text(2), row.Text(4), row.Text(6));
  if (!parsed.ok()) return parsed.status();
  JobRecord job = *std::move(parsed);
  job.request_id = row.Text(1);
  job.priority = static_cast<int32_t>(row.Int(3));
  job.time_limit_seconds = row.Double(5);
  job.attempt = static_cast<int32_t>(row.Int(7));
  job.progress = row.Double(8);
  job.samples_done = row.Int(9);
  job.chunks_done = row.Int(10);
  job.chunks_total = row.Int(11);
  job.eta_seconds = row.Double(12);
  job.device = row.Text(13);
  job.worker = row.Text(14);
  job.error_reason = row.Text(15);
  job.error_message = row.Text(16);
  job.error_code = static_cast<int32_t>(row.Int(17));
  job.created_ms = row.Int(18);
  job.started_ms = row.Int(19);
  job.finished_ms = row.Int(20);
  job.updated_ms = row.Int(21);
  job.checkpoint = row.Text(22);
  job.worker_kind = row.Text(23);
  job.run_ms = row.Int(24);
  job.tenant = row.Text(25);
  job.owner = row.Text(26);
  job.max_running = static_cast<int32_t>(row.Int(27));
  return job;
}

}  // namespace posbias::jobs::internal
