// The embedded JobStore: one SQLite connection (WAL journal) guarded by a mutex. Every operation
// is one transaction (BEGIN IMMEDIATE for writes), so a crash leaves either all of an operation or
// none of it. The schema is versioned in schema_migrations; migrations run in a transaction at open.
#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/jobs/job_store.h"
#include "server/jobs/store_common.h"
#include "server/status/error.h"

namespace posbias::jobs {
namespace {

using Json = nlohmann::json;
using internal::InternalError;
using internal::kColumns;
using internal::NotCurrent;
using internal::NotFound;
using internal::ReadRecord;
using internal::Refused;

#define POSBIAS_JOBS_RETURN_IF_ERROR(expr)       \
  do {                                           \
    absl::Status posbias_jobs_status_ = (expr);  \
    if (!posbias_jobs_status_.ok()) return posbias_jobs_status_; \
  } while (false)

// ---------------------------------------------------------------------------------------------
// Errors.

// A full disk is the operator's to fix and a busy database the client's to retry: neither is an
// internal error.
absl::Status SqliteError(sqlite3* db, const std::string& what) {
  const std::string message = absl::StrCat("job store: ", what, ": ", db ? sqlite3_errmsg(db) : "out of memory");
  switch (db ? sqlite3_errcode(db) : SQLITE_NOMEM) {
    case SQLITE_FULL:
      return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                             message + " (the data directory's disk is full; nothing of this call was stored)");
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kInternalError, message + "; retry");
    default:
      return InternalError(message);
  }
}

// ---------------------------------------------------------------------------------------------
// A prepared statement; values are bound in order by Bind.

// SQLITE_TRANSIENT without its C-style cast: SQLite copies the bound text.
const sqlite3_destructor_type kTransient = reinterpret_cast<sqlite3_destructor_type>(intptr_t{-1});

using SqlValue = std::variant<int64_t, double, std::string>;

class Statement {
 public:
  Statement(sqlite3* db, const std::string& sql) : db_(db), sql_(sql) {
    if (sqlite3_prepare_v2(db, sql.c_str(), static_cast<int>(sql.size()), &stmt_, nullptr) != SQLITE_OK) {
      status_ = SqliteError(db, absl::StrCat("prepare '", sql, "'"));
      stmt_ = nullptr;
    }
  }
  ~Statement() { sqlite3_finalize(stmt_); }
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  const absl::Status& status() const { return status_; }

  Statement& Bind(const SqlValue& value) {
    if (!status_.ok()) return *this;
    const int index = ++bound_;
    int rc = SQLITE_OK;
    if (const auto* i = std::get_if<int64_t>(&value)) {
      rc = sqlite3_bind_int64(stmt_, index, *i);
    } else if (const auto* d = std::get_if<double>(&value)) {
      rc = sqlite3_bind_double(stmt_, index, *d);
    } else {
      const std::string& text = std::get<std::string>(value);
      rc = sqlite3_bind_text64(stmt_, index, text.data(), text.size(), kTransient, SQLITE_UTF8);
    }
    if (rc != SQLITE_OK) status_ = SqliteError(db_, absl::StrCat("bind ", index, " of '", sql_, "'"));
    return *this;
  }
  template <typename... Values>
  Statement& BindAll(const Values&... values) {
    (Bind(ToSql(values)), ...);
    return *this;
  }

  // True with a row, false when done.
  absl::StatusOr<bool> Step() {
    if (!status_.ok()) return status_;
    const int rc = sqlite3_step(stmt_);
    if (rc == SQLITE_ROW) return true;
    if (rc == SQLITE_DONE) return false;
    status_ = SqliteError(db_, absl::StrCat("run '", sql_, "'"));
    return status_;
  }
  // Runs a statement that returns no rows (or ignores them).
  absl::Status Run() {
    absl::StatusOr<bool> row = Step();
    while (row.ok() && *row) row = Step();
    return row.status();
  }

  int64_t Int(int column) const { return sqlite3_column_int64(stmt_, column); }
  double Double(int column) const { return sqlite3_column_double(stmt_, column); }
  std::string Text(int column) const {
    const unsigned char* text = sqlite3_column_text(stmt_, column);
    if (text == nullptr) return std::string();
    return std::string(reinterpret_cast<const char*>(text), static_cast<size_t>(sqlite3_column_bytes(stmt_, column)));
  }

 private:
  static SqlValue ToSql(const std::string& value) { return value; }
  static SqlValue ToSql(const char* value) { return std::string(value); }
  static SqlValue ToSql(double value) { return value; }
  template <typename Integer>
  static SqlValue ToSql(Integer value) requires std::is_integral_v<Integer> {
    return static_cast<int64_t>(value);
  }

  sqlite3* db_;
  std::string sql_;
  sqlite3_stmt* stmt_ = nullptr;
  absl::Status status_;
  int bound_ = 0;
};

absl::Status Exec(sqlite3* db, const std::string& sql) {
  char* error = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) != SQLITE_OK) {
    sqlite3_free(error);
    return SqliteError(db, absl::StrCat("run '", sql, "'"));  // Its code decides: full, busy, other.
  }
  return absl::OkStatus();
}

// BEGIN [IMMEDIATE] ... COMMIT; rolled back when destroyed before Commit.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (open_) Exec(db_, "ROLLBACK").IgnoreError();
  }
  Transaction(const Transaction&) = delete;
  Transaction& operator=(const Transaction&) = delete;

  absl::Status Begin(bool write) {
    POSBIAS_JOBS_RETURN_IF_ERROR(Exec(db_, write ? "BEGIN IMMEDIATE" : "BEGIN"));
    open_ = true;
    return absl::OkStatus();
  }
  absl::Status Commit() {
    POSBIAS_JOBS_RETURN_IF_ERROR(Exec(db_, "COMMIT"));
    open_ = false;
    return absl::OkStatus();
  }

 private:
  sqlite3* db_;
  bool open_ = false;
};

// ---------------------------------------------------------------------------------------------
// Schema.

using internal::Migration;

// Append only: a released migration never changes (numbered as the shared store numbers its
// own; RenumberOldFile moves files of the earlier numbering over). `cancel_requested` remembers a
// cancel across a CANCELLING -> QUEUED re-queue (the job becomes CANCELLED at recovery and is
// never claimed).
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE jobs (
  id                 TEXT PRIMARY KEY NOT NULL,
  request_id         TEXT UNIQUE,
  state              TEXT NOT NULL,
  priority           INTEGER NOT NULL DEFAULT 0,
  created_ms         INTEGER NOT NULL,
  model              TEXT NOT NULL,
  spec_device        TEXT NOT NULL DEFAULT '',
  spec_json          TEXT NOT NULL,
  labels_json        TEXT NOT NULL DEFAULT '{}',
  time_limit_seconds REAL NOT NULL DEFAULT 0,
  attempt            INTEGER NOT NULL DEFAULT 0,
  progress           REAL NOT NULL DEFAULT 0,
  samples_done       INTEGER NOT NULL DEFAULT 0,
  chunks_done        INTEGER NOT NULL DEFAULT 0,
  chunks_total       INTEGER NOT NULL DEFAULT 0,
  eta_seconds        REAL NOT NULL DEFAULT -1,
  device             TEXT NOT NULL DEFAULT '',
  worker             TEXT NOT NULL DEFAULT '',
  error_reason       TEXT NOT NULL DEFAULT '',
  error_message      TEXT NOT NULL DEFAULT '',
  error_code         INTEGER NOT NULL DEFAULT 0,
  started_ms         INTEGER NOT NULL DEFAULT 0,
  finished_ms        INTEGER NOT NULL DEFAULT 0,
  updated_ms         INTEGER NOT NULL DEFAULT 0,
  checkpoint         TEXT NOT NULL DEFAULT '',
  cancel_requested   INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX jobs_claim ON jobs (state, priority DESC, created_ms, id);
CREATE INDEX jobs_newest ON jobs (created_ms DESC, id DESC);
CREATE INDEX jobs_model_state ON jobs (model, state);
CREATE INDEX jobs_finished ON jobs (state, finished_ms);
CREATE TABLE results (
  job_id      TEXT PRIMARY KEY NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
  result_json TEXT NOT NULL
);
)sql"},
    // Parts (the shared store's migration 2): a file serves one replica, whose jobs are never
    // split, so there is nothing to add; the number is kept so both stores number alike.
    {2, R"sql(
SELECT 1;
)sql"},
    // Attempts lost to crashes, kills and expired leases (not to drains): the poison-job cap.
    {3, R"sql(
ALTER TABLE jobs ADD COLUMN lost_attempts INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Run time over all attempts: the time limit counts it, not the current attempt's alone.
    {4, R"sql(
ALTER TABLE jobs ADD COLUMN run_ms INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Tenancy: the owning tenant and principal, and the principal's running-jobs quota.
    {5, R"sql(
ALTER TABLE jobs ADD COLUMN tenant TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN owner TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN max_running INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_owner ON jobs (owner, state);
)sql"},
    // The model registration a job is bound to (ListFilter::bound_to), read back from the specs of
    // the jobs stored before it.
    {6, R"sql(
ALTER TABLE jobs ADD COLUMN model_uid TEXT NOT NULL DEFAULT '';
UPDATE jobs SET model_uid = COALESCE(json_extract(spec_json, '$.model_uid'), '');
CREATE INDEX jobs_model_uid ON jobs (model_uid, state);
)sql"},
    // Claims take the tenants in turn (internal::kTenantTurn): per tenant, its running jobs and
    // its latest start.
    {7, R"sql(
CREATE INDEX jobs_tenant_state ON jobs (tenant, state);
CREATE INDEX jobs_tenant_started ON jobs (tenant, started_ms);
)sql"},
};

// The highest migration recorded in the file (0: none).
absl::StatusOr<int64_t> RecordedVersion(sqlite3* db) {
  Statement current(db, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  absl::StatusOr<bool> row = current.Step();
  if (!row.ok()) return row.status();
  return current.Int(0);
}

// Files written before both stores numbered their migrations alike recorded versions 1..6, where
// 2..6 are today's 3..7 (the shared store's migration 2, parts, had no SQLite counterpart). Such a
// file (recorded 2..6: every release since has recorded 7 or more in the same transaction that
// began the numbering) is renumbered: its versions from 2 move up by one, and 2 is recorded as
// done. Nothing is re-applied; each migration keeps its meaning.
absl::Status RenumberOldFile(sqlite3* db, int64_t recorded, int64_t now_ms) {
  if (recorded < 2 || recorded > 6) return absl::OkStatus();
  for (int64_t version = recorded; version >= 2; --version) {  // Downwards: versions are a key.
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db, "UPDATE schema_migrations SET version = ? WHERE version = ?").BindAll(version + 1, version).Run());
  }
  return Statement(db, "INSERT INTO schema_migrations (version, applied_ms) VALUES (2, ?)").BindAll(now_ms).Run();
}

absl::Status Migrate(sqlite3* db, int64_t now_ms) {
  Transaction transaction(db);
  POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
  POSBIAS_JOBS_RETURN_IF_ERROR(Exec(db,
      "CREATE TABLE IF NOT EXISTS schema_migrations ("
      "version INTEGER PRIMARY KEY NOT NULL, applied_ms INTEGER NOT NULL)"));
  absl::StatusOr<int64_t> recorded = RecordedVersion(db);
  if (!recorded.ok()) return recorded.status();
  POSBIAS_JOBS_RETURN_IF_ERROR(RenumberOldFile(db, *recorded, now_ms));
  recorded = RecordedVersion(db);
  if (!recorded.ok()) return recorded.status();
  const int64_t version = *recorded;
  const int64_t latest = kMigrations[std::size(kMigrations) - 1].version;
  if (absl::Status newer = internal::CheckSchemaVersion(version, latest); !newer.ok()) return newer;
  for (const Migration& migration : kMigrations) {
    if (migration.version <= version) continue;
    POSBIAS_JOBS_RETURN_IF_ERROR(Exec(db, migration.sql));
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db, "INSERT INTO schema_migrations (version, applied_ms) VALUES (?, ?)")
            .BindAll(migration.version, now_ms)
            .Run());
  }
  return transaction.Commit();
}

// ---------------------------------------------------------------------------------------------
// Rows.

constexpr const char* kTerminalStates = "('succeeded', 'failed', 'cancelled')";

// ---------------------------------------------------------------------------------------------
// The store.

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(sqlite3* db, Clock clock, int max_lost_attempts)
      : db_(db), clock_(std::move(clock)), max_lost_attempts_(max_lost_attempts) {}
  ~SqliteJobStore() override { sqlite3_close_v2(db_); }
  SqliteJobStore(const SqliteJobStore&) = delete;
  SqliteJobStore& operator=(const SqliteJobStore&) = delete;

  absl::StatusOr<Created> Create(JobRecord job, int64_t max_queued, int64_t max_queued_for_owner = 0,
                                 int64_t max_queued_for_tenant = 0) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    if (!job.request_id.empty()) {
      Statement existing(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE request_id = ?"));
      existing.BindAll(job.request_id);
      absl::StatusOr<bool> row = existing.Step();
      if (!row.ok()) return row.status();
      if (*row) {
        absl::StatusOr<JobRecord> found = ReadRecord(existing);
        if (!found.ok()) return found.status();
        POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
        return Created{*std::move(found), false};
      }
    }
    if (max_queued > 0) {
      absl::StatusOr<int64_t> queued = CountWhere("state = 'queued'");
      if (!queued.ok()) return queued.status();
      if (*queued >= max_queued) {
        return internal::QueueFull(*queued, max_queued);
      }
    }
    if (max_queued_for_owner > 0) {  // In the write transaction: the count and the insert are one step.
      Statement count(db_, "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND owner = ?");
      count.BindAll(job.owner);
      absl::StatusOr<bool> row = count.Step();
      if (!row.ok()) return row.status();
      if (count.Int(0) >= max_queued_for_owner) return internal::QuotaExceeded(job.owner, count.Int(0), max_queued_for_owner);
    }
    if (max_queued_for_tenant > 0) {  // Likewise: one tenant's share of the queue, while another tenant queues.
      Statement count(db_,
                      "SELECT COUNT(*) FILTER (WHERE tenant = ?1), COUNT(*) FILTER (WHERE tenant <> ?1) "
                      "FROM jobs WHERE state = 'queued'");
      count.BindAll(job.tenant);
      absl::StatusOr<bool> row = count.Step();
      if (!row.ok()) return row.status();
      if (count.Int(0) >= max_queued_for_tenant && count.Int(1) > 0) {
        return internal::TenantShareFull(job.tenant, count.Int(0), max_queued_for_tenant);
      }
    }
    const int64_t now = clock_();
    if (job.id.empty()) {
      absl::StatusOr<std::string> id = NewId();
      if (!id.ok()) return id.status();
      job.id = *std::move(id);
    } else if (Exists(job.id)) {
      return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kInternalError,
                             absl::StrCat("job ", job.id, " already exists"));
    }
    if (job.created_ms == 0) job.created_ms = now;
    job.state = JobState::kQueued;
    job.updated_ms = now;
    static const std::string kInsert = absl::StrCat(
        "INSERT INTO jobs (", kColumns, internal::kInsertExtraColumns, ") VALUES (",
        internal::InsertPlaceholders([](int, const std::string&) { return std::string("?"); }), ")");
    Statement insert(db_, kInsert);
    std::apply([&insert](const auto&... values) { insert.BindAll(values...); }, internal::InsertValues(job));
    POSBIAS_JOBS_RETURN_IF_ERROR(insert.Run());
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return Created{std::move(job), true};
  }

  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return job;
  }

  absl::StatusOr<JobPage> List(const ListFilter& filter) override {
    int64_t page_size = filter.page_size == 0 ? 50 : filter.page_size;
    page_size = std::clamp<int64_t>(page_size, 1, 1000);
    std::vector<SqlValue> values;
    std::vector<std::string> conditions = Conditions(filter, values);
    if (!filter.page_token.empty()) {
      absl::StatusOr<std::pair<int64_t, std::string>> after = internal::DecodePageToken(filter.page_token);
      if (!after.ok()) return after.status();
      conditions.push_back("(created_ms < ? OR (created_ms = ? AND id < ?))");
      values.push_back(after->first);
      values.push_back(after->first);
      values.push_back(after->second);
    }
    std::string sql = absl::StrCat("SELECT ", kColumns, " FROM jobs");
    if (!conditions.empty()) absl::StrAppend(&sql, " WHERE ", absl::StrJoin(conditions, " AND "));
    absl::StrAppend(&sql, " ORDER BY created_ms DESC, id DESC LIMIT ?");
    values.push_back(page_size + 1);

    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    Statement select(db_, sql);
    for (const SqlValue& value : values) select.Bind(value);
    JobPage page;
    while (true) {
      absl::StatusOr<bool> row = select.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      if (static_cast<int64_t>(page.jobs.size()) == page_size) {
        const JobRecord& last = page.jobs.back();
        page.next_page_token = internal::EncodePageToken(last.created_ms, last.id);
        break;
      }
      absl::StatusOr<JobRecord> job = ReadRecord(select);
      if (!job.ok()) return job.status();
      page.jobs.push_back(*std::move(job));
    }
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return page;
  }

  absl::StatusOr<std::optional<JobRecord>> ClaimNext(const std::string& worker,
                                                     const std::vector<std::string>& devices,
                                                     const std::string& device_name) override {
    std::string sql =
        "SELECT id FROM jobs WHERE state = 'queued' AND cancel_requested = 0 "
        // The owner's running-jobs quota: the job waits while its owner has that many running.
        "AND (max_running = 0 OR (SELECT COUNT(*) FROM jobs AS r WHERE r.owner = jobs.owner "
        "AND r.state IN ('running', 'cancelling')) < max_running) AND (spec_device = ''";
    if (!devices.empty()) {
      std::vector<std::string> marks(devices.size(), "?");
      absl::StrAppend(&sql, " OR spec_device IN (", absl::StrJoin(marks, ", "), ")");
    }
    absl::StrAppend(&sql, ") ORDER BY ", internal::kTenantTurn, ", priority DESC, created_ms ASC, id ASC LIMIT 1");

    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    Statement select(db_, sql);
    for (const std::string& device : devices) select.Bind(device);
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    if (!*row) {
      POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
      return std::optional<JobRecord>();
    }
    const std::string id = select.Text(0);
    const int64_t now = clock_();
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_,
                  "UPDATE jobs SET state = 'running', attempt = attempt + 1, worker = ?, device = ?, "
                  "started_ms = CASE WHEN started_ms = 0 THEN ? ELSE started_ms END, updated_ms = ? "
                  "WHERE id = ?")
            .BindAll(worker, device_name, now, now, id)
            .Run());
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return std::optional<JobRecord>(*std::move(job));
  }

  absl::StatusOr<JobRecord> UpdateProgress(const std::string& id, int32_t attempt,
                                           const ProgressUpdate& update) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    if (job->attempt != attempt || IsTerminal(job->state) || job->state == JobState::kQueued) {
      return NotCurrent(id, attempt);
    }
    const int64_t now = clock_();
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_,
                  "UPDATE jobs SET progress = ?, samples_done = ?, chunks_done = ?, chunks_total = ?, "
                  "eta_seconds = ?, checkpoint = CASE WHEN ? = '' THEN checkpoint ELSE ? END, "
                  "run_ms = CASE WHEN ? < 0 THEN run_ms ELSE ? END, updated_ms = ? WHERE id = ?")
            .BindAll(update.progress, update.samples_done, update.chunks_done, update.chunks_total,
                     update.eta_seconds, update.checkpoint, update.checkpoint, update.run_ms, update.run_ms, now, id)
            .Run());
    job = Load(id);
    if (!job.ok()) return job.status();
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return job;
  }

  absl::StatusOr<JobRecord> Transition(const std::string& id, JobState to,
                                       const TransitionOptions& options) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    if (options.attempt.has_value() && *options.attempt != job->attempt) {
      return NotCurrent(id, *options.attempt);
    }
    POSBIAS_JOBS_RETURN_IF_ERROR(Move(*job, to, options));
    job = Load(id);
    if (!job.ok()) return job.status();
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return job;
  }

  absl::StatusOr<JobRecord> Succeed(const std::string& id, int32_t attempt,
                                    const std::string& result_json) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    if (job->attempt != attempt) return NotCurrent(id, attempt);
    POSBIAS_JOBS_RETURN_IF_ERROR(Move(*job, JobState::kSucceeded, TransitionOptions{}));
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_, "INSERT OR REPLACE INTO results (job_id, result_json) VALUES (?, ?)")
            .BindAll(id, result_json)
            .Run());
    job = Load(id);
    if (!job.ok()) return job.status();
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return job;
  }

  absl::StatusOr<std::string> GetResult(const std::string& id) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    if (job->state != JobState::kSucceeded) {
      return internal::NoResult(id, job->state);
    }
    Statement select(db_, "SELECT result_json FROM results WHERE job_id = ?");
    select.BindAll(id);
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    if (!*row) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kJobNotFinished,
                             absl::StrCat("job ", id, " is succeeded but has no stored result"));
    }
    std::string result = select.Text(0);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return result;
  }

  absl::Status Delete(const std::string& id, bool force) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    if (!IsTerminal(job->state) && !force) {
      return internal::StillActive(id, job->state);
    }
    POSBIAS_JOBS_RETURN_IF_ERROR(Statement(db_, "DELETE FROM results WHERE job_id = ?").BindAll(id).Run());
    POSBIAS_JOBS_RETURN_IF_ERROR(Statement(db_, "DELETE FROM jobs WHERE id = ?").BindAll(id).Run());
    return transaction.Commit();
  }

  absl::StatusOr<int64_t> RecoverAfterRestart() override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    const int64_t now = clock_();
    // A job still RUNNING at start-up lost its attempt (the process died under it): the one that
    // did so too often fails instead of taking the next worker down.
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_, "UPDATE jobs SET lost_attempts = lost_attempts + 1 WHERE state = 'running'").Run());
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_,
                  "UPDATE jobs SET state = 'failed', worker = '', finished_ms = ?, updated_ms = ?, "
                  "error_reason = 'ATTEMPTS_EXHAUSTED', error_code = ?, error_message = ? "
                  "WHERE state = 'running' AND lost_attempts >= ?")
            .BindAll(now, now, internal::kAttemptsExhaustedCode, std::string(internal::kAttemptsExhaustedMessage),
                     max_lost_attempts_)
            .Run());
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_, "UPDATE jobs SET state = 'queued', worker = '', updated_ms = ? WHERE state = 'running'")
            .BindAll(now)
            .Run());
    const int64_t requeued = sqlite3_changes64(db_);
    // A cancel asked before the restart wins: CANCELLING jobs, and CANCELLING jobs re-queued at
    // shutdown, become CANCELLED.
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_,
                  "UPDATE jobs SET state = 'cancelled', worker = '', finished_ms = ?, updated_ms = ? "
                  "WHERE state = 'cancelling' OR (state = 'queued' AND cancel_requested = 1)")
            .BindAll(now, now)
            .Run());
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return requeued;
  }

  absl::StatusOr<int64_t> PurgeFinishedBefore(int64_t cutoff_ms) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
    const std::string where = absl::StrCat("state IN ", kTerminalStates, " AND finished_ms < ?");
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_, absl::StrCat("DELETE FROM results WHERE job_id IN (SELECT id FROM jobs WHERE ", where, ")"))
            .BindAll(cutoff_ms)
            .Run());
    POSBIAS_JOBS_RETURN_IF_ERROR(
        Statement(db_, absl::StrCat("DELETE FROM jobs WHERE ", where)).BindAll(cutoff_ms).Run());
    const int64_t purged = sqlite3_changes64(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return purged;
  }

  absl::Status RenewLease(const std::string& id, int32_t attempt) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    absl::StatusOr<JobRecord> job = Load(id);
    if (!job.ok()) return job.status();
    if (job->attempt != attempt || IsTerminal(job->state) || job->state == JobState::kQueued) {
      return NotCurrent(id, attempt);
    }
    return transaction.Commit();
  }

  // One process uses this store: RecoverAfterRestart does the reaper's work at start-up.
  absl::StatusOr<int64_t> ReapExpiredLeases() override { return 0; }

  absl::StatusOr<std::map<JobState, int64_t>> CountByState() override {
    std::map<JobState, int64_t> counts;
    for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kCancelling,
                           JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
      counts[state] = 0;
    }
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    Statement select(db_, "SELECT state, COUNT(*) FROM jobs GROUP BY state");
    while (true) {
      absl::StatusOr<bool> row = select.Step();
      if (!row.ok()) return row.status();
      if (!*row) break;
      absl::StatusOr<JobState> state = ParseJobState(select.Text(0));
      if (!state.ok()) return InternalError(absl::StrCat("job store: unknown state '", select.Text(0), "'"));
      counts[*state] = select.Int(1);
    }
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return counts;
  }

  absl::StatusOr<int64_t> Count(const ListFilter& filter) override {
    std::vector<SqlValue> values;
    const std::vector<std::string> conditions = Conditions(filter, values);
    std::string sql = "SELECT COUNT(*) FROM jobs";
    if (!conditions.empty()) absl::StrAppend(&sql, " WHERE ", absl::StrJoin(conditions, " AND "));
    return CountOf(sql, values);
  }

  absl::StatusOr<int64_t> CountQueuedAhead(const JobRecord& job, const std::optional<std::string>& tenant) override {
    const int64_t priority = job.priority;
    std::vector<SqlValue> values = {job.id, priority, priority, job.created_ms, job.created_ms, job.id,
                                    job.worker_kind, job.worker_kind};
    // Only jobs a worker that could take this one would claim first: for a job of one worker kind,
    // those of that kind or any; for a job of any kind, all.
    std::string sql =
        "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND id <> ? AND (priority > ? OR (priority = ? AND "
        "(created_ms < ? OR (created_ms = ? AND id < ?)))) AND (? = '' OR spec_device = '' OR spec_device = ?)";
    if (tenant) {
      absl::StrAppend(&sql, " AND tenant = ?");
      values.push_back(*tenant);
    }
    return CountOf(sql, values);
  }

 private:
  // The WHERE conditions of `filter` (all but its page), their values appended to `values`.
  static std::vector<std::string> Conditions(const ListFilter& filter, std::vector<SqlValue>& values) {
    std::vector<std::string> conditions;
    if (!filter.states.empty()) {
      std::vector<std::string> marks;
      for (JobState state : filter.states) {
        marks.push_back("?");
        values.push_back(JobStateName(state));
      }
      conditions.push_back(absl::StrCat("state IN (", absl::StrJoin(marks, ", "), ")"));
    }
    if (!filter.model.empty()) {
      conditions.push_back("model = ?");
      values.push_back(filter.model);
    }
    if (filter.bound_to) {
      const ModelBinding& model = *filter.bound_to;
      // Its first model, or (comparison jobs, which always record uids) one of its versus models.
      conditions.push_back(
          "((model IN (?, ?) AND ((? <> '' AND model_uid = ?) OR (model_uid = '' AND (? = '' OR tenant = ? OR "
          "model = ?)))) OR (? <> '' AND EXISTS (SELECT 1 FROM json_each(jobs.spec_json, '$.versus') AS v "
          "WHERE json_extract(v.value, '$.uid') = ?)))");
      for (const std::string& value : {model.name, model.path, model.uid, model.uid, model.tenant, model.tenant,
                                       model.path, model.uid, model.uid}) {
        values.push_back(value);
      }
    }
    if (filter.tenant) {
      conditions.push_back("tenant = ?");
      values.push_back(*filter.tenant);
    }
    if (!filter.owner.empty()) {
      conditions.push_back("owner = ?");
      values.push_back(filter.owner);
    }
    for (const auto& [key, value] : filter.labels) {
      conditions.push_back(
          "EXISTS (SELECT 1 FROM json_each(jobs.labels_json) AS l WHERE l.key = ? AND l.value = ?)");
      values.push_back(key);
      values.push_back(value);
    }
    return conditions;
  }

  // One COUNT(*) query in a read transaction.
  absl::StatusOr<int64_t> CountOf(const std::string& sql, const std::vector<SqlValue>& values) {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    Statement select(db_, sql);
    for (const SqlValue& value : values) select.Bind(value);
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    const int64_t count = select.Int(0);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return count;
  }

  // The helpers below run inside the caller's transaction, with mutex_ held.

  absl::StatusOr<JobRecord> Load(const std::string& id) {
    Statement select(db_, absl::StrCat("SELECT ", kColumns, " FROM jobs WHERE id = ?"));
    select.BindAll(id);
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    if (!*row) return NotFound(id);
    return ReadRecord(select);
  }

  bool Exists(const std::string& id) {
    Statement select(db_, "SELECT 1 FROM jobs WHERE id = ?");
    select.BindAll(id);
    absl::StatusOr<bool> row = select.Step();
    return !row.ok() || *row;  // An error counts as taken.
  }

  absl::StatusOr<int64_t> CountWhere(const std::string& condition) {
    Statement select(db_, absl::StrCat("SELECT COUNT(*) FROM jobs WHERE ", condition));
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    return select.Int(0);
  }

  absl::StatusOr<std::string> NewId() {
    for (int tries = 0; tries < 16; ++tries) {
      std::string id = internal::RandomJobId();
      if (!Exists(id)) return id;
    }
    return InternalError("job store: could not find a free job id");
  }

  // Applies `job.state -> to` with its side effects; the caller has checked the attempt.
  absl::Status Move(const JobRecord& job, JobState to, const TransitionOptions& options) {
    if (!IsAllowedTransition(job.state, to)) return Refused(job.id, job.state, to);
    const int64_t now = clock_();
    const bool failed = to == JobState::kFailed;
    const bool succeeded = to == JobState::kSucceeded;
    return Statement(db_,
                     "UPDATE jobs SET state = ?, updated_ms = ?, "
                     "finished_ms = CASE WHEN ? THEN ? ELSE finished_ms END, "
                     "worker = CASE WHEN ? THEN '' ELSE worker END, "
                     "cancel_requested = CASE WHEN ? THEN 1 ELSE cancel_requested END, "
                     "error_reason = CASE WHEN ? THEN ? ELSE error_reason END, "
                     "error_message = CASE WHEN ? THEN ? ELSE error_message END, "
                     "error_code = CASE WHEN ? THEN ? ELSE error_code END, "
                     "progress = CASE WHEN ? THEN 1 ELSE progress END, "
                     "eta_seconds = CASE WHEN ? THEN 0 ELSE eta_seconds END "
                     "WHERE id = ?")
        .BindAll(JobStateName(to), now, IsTerminal(to), now, to == JobState::kQueued,
                 to == JobState::kCancelling, failed, options.error_reason, failed,
                 options.error_message, failed, options.error_code, succeeded, succeeded, job.id)
        .Run();
  }

  sqlite3* db_;
  Clock clock_;
  int max_lost_attempts_;
  std::mutex mutex_;
};

#undef POSBIAS_JOBS_RETURN_IF_ERROR

}  // namespace

Clock SystemClock() {
  return [] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(
               std::chrono::system_clock::now().time_since_epoch())
        .count();
  };
}

absl::StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path, Clock clock,
                                                             int max_lost_attempts) {
  if (!clock) clock = SystemClock();
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = ErrorWithReason(
        absl::StatusCode::kUnavailable, ErrorReason::kInternalError,
        absl::StrCat("job store: cannot open ", path, ": ", db ? sqlite3_errmsg(db) : sqlite3_errstr(rc)));
    sqlite3_close_v2(db);
    return status;
  }
  auto fail = [db](absl::Status status) {
    sqlite3_close_v2(db);
    return status;
  };
  sqlite3_extended_result_codes(db, 1);
  if (sqlite3_busy_timeout(db, 5000) != SQLITE_OK) return fail(SqliteError(db, "set busy timeout"));
  {
    Statement journal(db, "PRAGMA journal_mode = WAL");
    absl::StatusOr<bool> row = journal.Step();
    if (!row.ok()) return fail(row.status());
    const std::string mode = *row ? journal.Text(0) : std::string();
    if (mode != "wal" && mode != "memory") {
      return fail(InternalError(absl::StrCat("job store: ", path, " cannot use the WAL journal (got '", mode, "')")));
    }
  }
  if (absl::Status status = Exec(db, "PRAGMA foreign_keys = ON"); !status.ok()) {
    return fail(status);
  }
  if (absl::Status status = Migrate(db, clock()); !status.ok()) return fail(status);
  return std::unique_ptr<JobStore>(std::make_unique<SqliteJobStore>(db, std::move(clock), max_lost_attempts));
}

}  // namespace posbias::jobs
