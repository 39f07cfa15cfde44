// What the job stores share: the column list of a job row, reading a row into a JobRecord, the
// store's error statuses, page tokens and job ids. Internal to the jobs room (not installed).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "server/jobs/job.h"

namespace posbias::jobs::internal {

// The error a job gets when its attempts were lost too often (both stores write it in SQL).
inline constexpr char kAttemptsExhaustedMessage[] =
    "the job's attempts were lost too often (its worker crashed, was killed or lost its lease while "
    "running it), so it is not run again";
inline constexpr int kAttemptsExhaustedCode = 10;  // ABORTED.

// The columns of a job row, listed once: X(column, the value an INSERT binds, how a row's value is
// read back into `job`). kColumns (the SELECT list), InsertColumns, InsertPlaceholders,
// InsertValues and ReadRecord are all made from this list, so a column cannot be read from one
// position and written at another. id, spec_json, labels_json and state are read together by
// RecordFromFields.
#define POSBIAS_JOB_COLUMNS(X)                                                                    \
  X(id, job.id, (void)0)                                                                          \
  X(request_id, job.request_id, job.request_id = row.Text(i))                                     \
  X(spec_json, SpecJson(job.spec), (void)0)                                                       \
  X(priority, job.priority, job.priority = static_cast<int32_t>(row.Int(i)))                      \
  X(labels_json, LabelsJson(job.labels), (void)0)                                                 \
  X(time_limit_seconds, job.time_limit_seconds, job.time_limit_seconds = row.Double(i))           \
  X(state, std::string(JobStateName(job.state)), (void)0)                                         \
  X(attempt, job.attempt, job.attempt = static_cast<int32_t>(row.Int(i)))                         \
  X(progress, job.progress, job.progress = row.Double(i))                                         \
  X(samples_done, job.samples_done, job.samples_done = row.Int(i))                                \
  X(chunks_done, job.chunks_done, job.chunks_done = row.Int(i))                                   \
  X(chunks_total, job.chunks_total, job.chunks_total = row.Int(i))                                \
  X(eta_seconds, job.eta_seconds, job.eta_seconds = row.Double(i))                                \
  X(device, job.device, job.device = row.Text(i))                                                 \
  X(worker, job.worker, job.worker = row.Text(i))                                                 \
  X(error_reason, job.error_reason, job.error_reason = row.Text(i))                               \
  X(error_message, job.error_message, job.error_message = row.Text(i))                            \
  X(error_code, job.error_code, job.error_code = static_cast<int32_t>(row.Int(i)))                \
  X(created_ms, job.created_ms, job.created_ms = row.Int(i))                                      \
  X(started_ms, job.started_ms, job.started_ms = row.Int(i))                                      \
  X(finished_ms, job.finished_ms, job.finished_ms = row.Int(i))                                   \
  X(updated_ms, job.updated_ms, job.updated_ms = row.Int(i))                                      \
  X(checkpoint, job.checkpoint, job.checkpoint = row.Text(i))                                     \
  X(spec_device, job.worker_kind, job.worker_kind = row.Text(i))                                  \
  X(run_ms, job.run_ms, job.run_ms = row.Int(i))                                                  \
  X(tenant, job.tenant, job.tenant = row.Text(i))                                                 \
  X(owner, job.owner, job.owner = row.Text(i))                                                    \
  X(max_running, job.max_running, job.max_running = static_cast<int32_t>(row.Int(i)))

#define POSBIAS_JOB_COLUMN_NAME(column, value, read) #column ", "
inline constexpr char kColumnList[] = POSBIAS_JOB_COLUMNS(POSBIAS_JOB_COLUMN_NAME);  // Ends with ", ".
#undef POSBIAS_JOB_COLUMN_NAME
// The columns of a job row, comma-separated, in the list's order (what a SELECT reads).
inline constexpr std::string_view kColumnNames(kColumnList, sizeof(kColumnList) - 3);
inline constexpr absl::string_view kColumns(kColumnList, sizeof(kColumnList) - 3);

#define POSBIAS_JOB_COLUMN_COUNT(column, value, read) +1
inline constexpr int kColumnCount = 0 POSBIAS_JOB_COLUMNS(POSBIAS_JOB_COLUMN_COUNT);
#undef POSBIAS_JOB_COLUMN_COUNT

// The index of `column` in the list (a name not in it does not compile).
consteval int ColumnIndex(std::string_view column) {
  int index = 0;
  for (std::string_view rest = kColumnNames;; ++index) {
    const size_t comma = rest.find(", ");
    if (rest.substr(0, comma) == column) return index;
    if (comma == std::string_view::npos) throw "not a column of a job row";
    rest.remove_prefix(comma + 2);
  }
}

// An INSERT of a new job: the row's columns, `model` and `model_uid` (stored for the filters by
// model and by registration, ListFilter::model and bound_to).
inline constexpr char kInsertExtraColumns[] = ", model, model_uid";
// Its placeholders: `placeholder(i, column)` for column i (0-based; "model", "model_uid" last), with an empty
// request_id stored as NULL (the unique index ignores NULLs).
template <typename Placeholder>
std::string InsertPlaceholders(const Placeholder& placeholder) {
  std::string sql;
  int i = 0;
  std::string_view rest = kColumnNames;
  while (true) {
    const size_t comma = rest.find(", ");
    const std::string_view column = rest.substr(0, comma);
    const std::string value = placeholder(i++, std::string(column));
    sql += column == "request_id" ? "NULLIF(" + value + ", '')" : value;
    sql += ", ";
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 2);
  }
  return sql + placeholder(i, std::string("model")) + ", " + placeholder(i + 1, std::string("model_uid"));
}

std::string SpecJson(const JacobianJobSpec& spec);
std::string LabelsJson(const std::map<std::string, std::string>& labels);

// The values an INSERT of `job` binds, in the order of InsertPlaceholders.
#define POSBIAS_JOB_COLUMN_VALUE(column, value, read) std::make_tuple(value),
inline auto InsertValues(const JobRecord& job) {
  return std::tuple_cat(POSBIAS_JOB_COLUMNS(POSBIAS_JOB_COLUMN_VALUE) std::make_tuple(job.spec.model, job.spec.model_uid));
}
#undef POSBIAS_JOB_COLUMN_VALUE

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
// The claim order's first keys, for a candidate row of `jobs`: the tenants take turns. First the
// tenant with the fewest running jobs (a split job's parts each count, and its parent once), then
// the one whose latest start is oldest (round robin when every tenant runs as many); priority and
// first in, first out order the jobs within the tenant so chosen. So one tenant's many or
// high-priority jobs never keep another tenant's waiting past its turn.
inline constexpr char kTenantTurn[] =
    "(SELECT COUNT(*) FROM jobs AS t WHERE t.tenant = jobs.tenant AND t.state IN ('running', 'cancelling')) ASC, "
    "(SELECT COALESCE(MAX(t.started_ms), 0) FROM jobs AS t WHERE t.tenant = jobs.tenant) ASC";

// RESOURCE_EXHAUSTED / QUEUE_FULL: the tenant holds its share of the queue.
absl::Status TenantShareFull(const std::string& tenant, int64_t queued, int64_t share);
absl::Status NoResult(const std::string& id, JobState state);
absl::Status StillActive(const std::string& id, JobState state);

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
  absl::StatusOr<JobRecord> parsed =
      RecordFromFields(row.Text(ColumnIndex("id")), row.Text(ColumnIndex("spec_json")),
                       row.Text(ColumnIndex("labels_json")), row.Text(ColumnIndex("state")));
  if (!parsed.ok()) return parsed.status();
  JobRecord job = *std::move(parsed);
#define POSBIAS_JOB_COLUMN_READ(column, value, read) \
  {                                                  \
    [[maybe_unused]] constexpr int i = ColumnIndex(#column); \
    read;                                            \
  }
  POSBIAS_JOB_COLUMNS(POSBIAS_JOB_COLUMN_READ)
#undef POSBIAS_JOB_COLUMN_READ
  return job;
}

}  // namespace posbias::jobs::internal
