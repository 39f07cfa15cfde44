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
#include "server/status/error.h"

namespace posbias::jobs {
namespace {

using Json = nlohmann::json;

#define POSBIAS_JOBS_RETURN_IF_ERROR(expr)       \
  do {                                           \
    absl::Status posbias_jobs_status_ = (expr);  \
    if (!posbias_jobs_status_.ok()) return posbias_jobs_status_; \
  } while (false)

// ---------------------------------------------------------------------------------------------
// Errors.

absl::Status InternalError(const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kInternal, "INTERNAL_ERROR", message);
}

absl::Status SqliteError(sqlite3* db, const std::string& what) {
  return InternalError(absl::StrCat("job store: ", what, ": ", db ? sqlite3_errmsg(db) : "out of memory"));
}

absl::Status NotFound(const std::string& id) {
  return ErrorWithReason(absl::StatusCode::kNotFound, "JOB_NOT_FOUND", absl::StrCat("job ", id, " does not exist"));
}

absl::Status NotCurrent(const std::string& id, int32_t attempt) {
  return ErrorWithReason(absl::StatusCode::kAborted, "INTERNAL_ERROR",
                         absl::StrCat("job ", id, " attempt ", attempt, " is no longer current"));
}

absl::Status Refused(const std::string& id, JobState from, JobState to) {
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "JOB_NOT_FINISHED",
                         absl::StrCat("job ", id, " is ", JobStateName(from), ": cannot become ", JobStateName(to)));
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
    std::string message = error ? error : sqlite3_errmsg(db);
    sqlite3_free(error);
    return InternalError(absl::StrCat("job store: run '", sql, "': ", message));
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

struct Migration {
  int64_t version;
  const char* sql;
};

// Append only: a released migration never changes. `cancel_requested` remembers a cancel across a
// CANCELLING -> QUEUED re-queue (the job becomes CANCELLED at recovery and is never claimed).
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
};

absl::Status Migrate(sqlite3* db, int64_t now_ms) {
  Transaction transaction(db);
  POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/true));
  POSBIAS_JOBS_RETURN_IF_ERROR(Exec(db,
      "CREATE TABLE IF NOT EXISTS schema_migrations ("
      "version INTEGER PRIMARY KEY NOT NULL, applied_ms INTEGER NOT NULL)"));
  Statement current(db, "SELECT COALESCE(MAX(version), 0) FROM schema_migrations");
  absl::StatusOr<bool> row = current.Step();
  if (!row.ok()) return row.status();
  const int64_t version = current.Int(0);
  const int64_t latest = kMigrations[std::size(kMigrations) - 1].version;
  if (version > latest) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "INTERNAL_ERROR",
                           absl::StrCat("job store schema version ", version,
                                        " is newer than this server supports (", latest, ")"));
  }
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

constexpr char kColumns[] =
    "id, request_id, spec_json, priority, labels_json, time_limit_seconds, state, attempt, progress, "
    "samples_done, chunks_done, chunks_total, eta_seconds, device, worker, error_reason, "
    "error_message, error_code, created_ms, started_ms, finished_ms, updated_ms, checkpoint";

constexpr const char* kActiveStates = "('queued', 'running', 'cancelling')";
constexpr const char* kTerminalStates = "('succeeded', 'failed', 'cancelled')";

absl::StatusOr<JobRecord> ReadRecord(const Statement& row) {
  JobRecord job;
  job.id = row.Text(0);
  job.request_id = row.Text(1);
  const Json spec = Json::parse(row.Text(2), nullptr, /*allow_exceptions=*/false);
  absl::StatusOr<JacobianJobSpec> parsed = SpecFromJson(spec);
  if (spec.is_discarded() || !parsed.ok()) {
    return InternalError(absl::StrCat("job store: job ", job.id, " has a corrupt spec_json"));
  }
  job.spec = *std::move(parsed);
  job.priority = static_cast<int32_t>(row.Int(3));
  const Json labels = Json::parse(row.Text(4), nullptr, /*allow_exceptions=*/false);
  if (!labels.is_object()) {
    return InternalError(absl::StrCat("job store: job ", job.id, " has a corrupt labels_json"));
  }
  for (const auto& [key, value] : labels.items()) {
    if (!value.is_string()) {
      return InternalError(absl::StrCat("job store: job ", job.id, " has a corrupt labels_json"));
    }
    job.labels[key] = value.get<std::string>();
  }
  job.time_limit_seconds = row.Double(5);
  absl::StatusOr<JobState> state = ParseJobState(row.Text(6));
  if (!state.ok()) {
    return InternalError(absl::StrCat("job store: job ", job.id, " has an unknown state '", row.Text(6), "'"));
  }
  job.state = *state;
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
  return job;
}

std::string LabelsJson(const std::map<std::string, std::string>& labels) {
  Json json = Json::object();
  for (const auto& [key, value] : labels) json[key] = value;
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

// Page tokens: "<created_ms>/<id>" written as lowercase base-16 text.
std::string EncodePageToken(int64_t created_ms, const std::string& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::string plain = absl::StrCat(created_ms, "/", id);
  std::string token;
  token.reserve(plain.size() * 2);
  for (unsigned char c : plain) {
    token.push_back(kDigits[c >> 4]);
    token.push_back(kDigits[c & 0xf]);
  }
  return token;
}

absl::Status BadPageToken(const std::string& token) {
  return InvalidArgumentError({"INVALID_ARGUMENT", "page_token", token.substr(0, 64),
                               "a token from the previous page"});
}

absl::StatusOr<std::pair<int64_t, std::string>> DecodePageToken(const std::string& token) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (token.size() % 2 != 0 || token.size() > 1024) return BadPageToken(token);
  std::string plain;
  for (size_t i = 0; i < token.size(); i += 2) {
    const int high = nibble(token[i]), low = nibble(token[i + 1]);
    if (high < 0 || low < 0) return BadPageToken(token);
    plain.push_back(static_cast<char>(high * 16 + low));
  }
  const size_t slash = plain.find('/');
  if (slash == std::string::npos || slash == 0 || slash > 19 || slash + 1 == plain.size()) {
    return BadPageToken(token);
  }
  int64_t created_ms = 0;
  bool negative = false;
  size_t i = 0;
  if (plain[0] == '-') {
    negative = true;
    i = 1;
  }
  if (i == slash) return BadPageToken(token);
  for (; i < slash; ++i) {
    if (plain[i] < '0' || plain[i] > '9') return BadPageToken(token);
    created_ms = created_ms * 10 + (plain[i] - '0');
  }
  return std::make_pair(negative ? -created_ms : created_ms, plain.substr(slash + 1));
}

// ---------------------------------------------------------------------------------------------
// The store.

class SqliteJobStore final : public JobStore {
 public:
  SqliteJobStore(sqlite3* db, Clock clock)
      : db_(db), clock_(std::move(clock)), random_(std::random_device{}()) {}
  ~SqliteJobStore() override { sqlite3_close_v2(db_); }
  SqliteJobStore(const SqliteJobStore&) = delete;
  SqliteJobStore& operator=(const SqliteJobStore&) = delete;

  absl::StatusOr<Created> Create(JobRecord job, int64_t max_queued) override {
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
        return ErrorWithReason(absl::StatusCode::kResourceExhausted, "QUEUE_FULL",
                               absl::StrCat("the job queue is full: ", *queued, " jobs queued (limit ",
                                            max_queued, ")"));
      }
    }
    const int64_t now = clock_();
    if (job.id.empty()) {
      absl::StatusOr<std::string> id = NewId();
      if (!id.ok()) return id.status();
      job.id = *std::move(id);
    } else if (Exists(job.id)) {
      return ErrorWithReason(absl::StatusCode::kAlreadyExists, "INTERNAL_ERROR",
                             absl::StrCat("job ", job.id, " already exists"));
    }
    if (job.created_ms == 0) job.created_ms = now;
    job.state = JobState::kQueued;
    job.updated_ms = now;
    Statement insert(db_,
                     absl::StrCat("INSERT INTO jobs (", kColumns,
                                  ", model, spec_device) VALUES (?, NULLIF(?, ''), ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                                  "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"));
    insert.BindAll(job.id, job.request_id, SpecToJson(job.spec).dump(-1, ' ', false, Json::error_handler_t::replace),
                   job.priority, LabelsJson(job.labels), job.time_limit_seconds, JobStateName(job.state),
                   job.attempt, job.progress, job.samples_done, job.chunks_done, job.chunks_total,
                   job.eta_seconds, job.device, job.worker, job.error_reason, job.error_message,
                   job.error_code, job.created_ms, job.started_ms, job.finished_ms, job.updated_ms,
                   job.checkpoint, job.spec.model, job.spec.device);
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
    std::vector<std::string> conditions;
    std::vector<SqlValue> values;
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
    for (const auto& [key, value] : filter.labels) {
      conditions.push_back(
          "EXISTS (SELECT 1 FROM json_each(jobs.labels_json) AS l WHERE l.key = ? AND l.value = ?)");
      values.push_back(key);
      values.push_back(value);
    }
    if (!filter.page_token.empty()) {
      absl::StatusOr<std::pair<int64_t, std::string>> after = DecodePageToken(filter.page_token);
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
        page.next_page_token = EncodePageToken(last.created_ms, last.id);
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
        "SELECT id FROM jobs WHERE state = 'queued' AND cancel_requested = 0 AND (spec_device = ''";
    if (!devices.empty()) {
      std::vector<std::string> marks(devices.size(), "?");
      absl::StrAppend(&sql, " OR spec_device IN (", absl::StrJoin(marks, ", "), ")");
    }
    absl::StrAppend(&sql, ") ORDER BY priority DESC, created_ms ASC, id ASC LIMIT 1");

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
                  "updated_ms = ? WHERE id = ?")
            .BindAll(update.progress, update.samples_done, update.chunks_done, update.chunks_total,
                     update.eta_seconds, update.checkpoint, update.checkpoint, now, id)
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
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "JOB_NOT_FINISHED",
                             absl::StrCat("job ", id, " is ", JobStateName(job->state), ": it has no result"));
    }
    Statement select(db_, "SELECT result_json FROM results WHERE job_id = ?");
    select.BindAll(id);
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    if (!*row) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "JOB_NOT_FINISHED",
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
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "JOB_NOT_FINISHED",
                             absl::StrCat("job ", id, " is ", JobStateName(job->state),
                                          ": cancel it first or force the deletion"));
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

  absl::StatusOr<int64_t> CountActiveForModel(const std::string& model) override {
    std::lock_guard lock(mutex_);
    Transaction transaction(db_);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Begin(/*write=*/false));
    Statement select(db_, absl::StrCat("SELECT COUNT(*) FROM jobs WHERE model = ? AND state IN ", kActiveStates));
    select.BindAll(model);
    absl::StatusOr<bool> row = select.Step();
    if (!row.ok()) return row.status();
    const int64_t count = select.Int(0);
    POSBIAS_JOBS_RETURN_IF_ERROR(transaction.Commit());
    return count;
  }

 private:
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
    static constexpr char kDigits[] = "0123456789abcdef";
    for (int tries = 0; tries < 16; ++tries) {
      uint64_t bits = random_();
      std::string id = "j-";
      for (int i = 0; i < 12; ++i) {
        id.push_back(kDigits[bits & 0xf]);
        bits >>= 4;
      }
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
  std::mutex mutex_;
  std::mt19937_64 random_;
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

absl::StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path, Clock clock) {
  if (!clock) clock = SystemClock();
  sqlite3* db = nullptr;
  const int rc = sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  if (rc != SQLITE_OK) {
    absl::Status status = ErrorWithReason(
        absl::StatusCode::kUnavailable, "INTERNAL_ERROR",
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
  return std::unique_ptr<JobStore>(std::make_unique<SqliteJobStore>(db, std::move(clock)));
}

}  // namespace posbias::jobs
