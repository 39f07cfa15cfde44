// The shared JobStore: PostgreSQL, for any number of server processes on one database.
//
// - Claims: one UPDATE over `SELECT ... FOR UPDATE SKIP LOCKED`, so concurrent workers never take
//   the same job and never wait on each other's row locks.
// - Leases: a claim holds the job until lease_expires_ms; the worker renews it by heartbeat and with
//   every progress report. The reaper (ReapExpiredLeases, run periodically by every replica)
//   re-queues RUNNING jobs whose lease expired: their worker died or lost the database.
// - Fencing: the attempt number, incremented on every claim, is the token. Every write of a worker
//   (progress, checkpoint, result, final state) names its attempt and is refused (ABORTED) when the
//   job was re-queued or claimed again since, so a stale worker never overwrites a newer attempt.
// - Wake-ups: submissions and re-queues send NOTIFY posbias_jobs in their transaction; a listener
//   connection per process wakes idle workers (no busy polling).
// - Schema migrations are versioned in schema_migrations and applied under an advisory lock, so
//   replicas starting together migrate once.
// Timestamps and leases come from the injected clock (milliseconds); replicas need synchronized
// clocks (NTP), with skew far below the lease.
#include <pqxx/pqxx>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/jobs/job_store.h"
#include "server/jobs/store_common.h"
#include "server/status/error.h"

namespace posbias::jobs {
namespace {

using internal::InternalError;
using internal::kColumns;
using internal::NotCurrent;
using internal::NotFound;
using internal::Refused;

constexpr char kChannel[] = "posbias_jobs";
// Advisory lock keys (any fixed 64-bit numbers, unique to posbias).
constexpr int64_t kMigrationLock = 0x706f736269617301;  // "posbias" 01
constexpr int64_t kCreateLock = 0x706f736269617302;

absl::Status Unavailable(const std::string& what) {
  return ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kInternalError,
                         absl::StrCat("job store (PostgreSQL) unavailable: ", what));
}

// Reads the columns of kColumns from one result row.
class Row {
 public:
  explicit Row(const pqxx::row& row) : row_(row) {}
  std::string Text(int column) const {
    const pqxx::field field = row_[column];
    return field.is_null() ? std::string() : std::string(field.c_str(), field.size());
  }
  int64_t Int(int column) const { return row_[column].is_null() ? 0 : row_[column].as<int64_t>(); }
  double Double(int column) const { return row_[column].is_null() ? 0.0 : row_[column].as<double>(); }

 private:
  const pqxx::row& row_;
};

absl::StatusOr<JobRecord> ReadRecord(const pqxx::row& row) {
  absl::StatusOr<JobRecord> job = internal::ReadRecord(Row(row));
  if (!job.ok() || row.size() < internal::kColumnCount + 4) return job;
  const Row extra(row);
  job->parent_id = extra.Text(internal::kColumnCount);
  job->unit_begin = extra.Int(internal::kColumnCount + 1);
  job->unit_end = extra.Int(internal::kColumnCount + 2);
  job->parts_total = static_cast<int32_t>(extra.Int(internal::kColumnCount + 3));
  return job;
}

using internal::Migration;

// Append only: a released migration never changes.
constexpr Migration kMigrations[] = {
    {1, R"sql(
CREATE TABLE jobs (
  id                 TEXT PRIMARY KEY,
  request_id         TEXT UNIQUE,
  state              TEXT NOT NULL,
  priority           INTEGER NOT NULL DEFAULT 0,
  created_ms         BIGINT NOT NULL,
  model              TEXT NOT NULL,
  spec_device        TEXT NOT NULL DEFAULT '',
  spec_json          TEXT NOT NULL,
  labels_json        JSONB NOT NULL DEFAULT '{}',
  time_limit_seconds DOUBLE PRECISION NOT NULL DEFAULT 0,
  attempt            INTEGER NOT NULL DEFAULT 0,
  progress           DOUBLE PRECISION NOT NULL DEFAULT 0,
  samples_done       BIGINT NOT NULL DEFAULT 0,
  chunks_done        BIGINT NOT NULL DEFAULT 0,
  chunks_total       BIGINT NOT NULL DEFAULT 0,
  eta_seconds        DOUBLE PRECISION NOT NULL DEFAULT -1,
  device             TEXT NOT NULL DEFAULT '',
  worker             TEXT NOT NULL DEFAULT '',
  error_reason       TEXT NOT NULL DEFAULT '',
  error_message      TEXT NOT NULL DEFAULT '',
  error_code         INTEGER NOT NULL DEFAULT 0,
  started_ms         BIGINT NOT NULL DEFAULT 0,
  finished_ms        BIGINT NOT NULL DEFAULT 0,
  updated_ms         BIGINT NOT NULL DEFAULT 0,
  checkpoint         TEXT NOT NULL DEFAULT '',
  cancel_requested   BOOLEAN NOT NULL DEFAULT FALSE,
  lease_expires_ms   BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX jobs_claim ON jobs (priority DESC, created_ms, id) WHERE state = 'queued';
CREATE INDEX jobs_newest ON jobs (created_ms DESC, id DESC);
CREATE INDEX jobs_model_state ON jobs (model, state);
CREATE INDEX jobs_finished ON jobs (state, finished_ms);
CREATE INDEX jobs_leases ON jobs (lease_expires_ms) WHERE state IN ('running', 'cancelling');
CREATE TABLE results (
  job_id      TEXT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
  result_json TEXT NOT NULL
);
)sql"},
    // Parts: a part row names its parent and its range of units of work (sample_begin and
    // sample_end: units, which are samples for a job without versus; job.h); a parent counts its
    // parts and those done.
    {2, R"sql(
ALTER TABLE jobs ADD COLUMN parent_id TEXT NOT NULL DEFAULT '';
ALTER TABLE jobs ADD COLUMN sample_begin BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN sample_end BIGINT NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN parts_total INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN parts_done INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_parts ON jobs (parent_id) WHERE parent_id <> '';
)sql"},
    // Attempts lost to crashes, kills and expired leases (not to drains): the poison-job cap.
    {3, R"sql(
ALTER TABLE jobs ADD COLUMN lost_attempts INTEGER NOT NULL DEFAULT 0;
)sql"},
    // Run time over all attempts: the time limit counts it, not the current attempt's alone.
    {4, R"sql(
ALTER TABLE jobs ADD COLUMN run_ms BIGINT NOT NULL DEFAULT 0;
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
UPDATE jobs SET model_uid = COALESCE(spec_json::jsonb ->> 'model_uid', '');
CREATE INDEX jobs_model_uid ON jobs (model_uid, state);
)sql"},
    // Claims take the tenants in turn (internal::kTenantTurn): per tenant, its running jobs and
    // its latest start.
    {7, R"sql(
CREATE INDEX jobs_tenant_state ON jobs (tenant, state);
CREATE INDEX jobs_tenant_started ON jobs (tenant, started_ms);
)sql"},
};

// The job columns plus the part columns (at kColumnCount ...).
const std::string kAllColumns = absl::StrCat(kColumns, ", parent_id, sample_begin, sample_end, parts_total");
// Jobs users see: parents and unsplit jobs, not parts.
constexpr char kTopLevel[] = "parent_id = ''";
// A parent whose parts still run holds no lease and is not claimable.
constexpr char kWaitingForParts[] = "(parts_total > 0 AND parts_done < parts_total)";

// A fixed set of connections shared by the store's callers; Acquire waits for a free one.
class ConnectionPool {
 public:
  ConnectionPool(std::string uri, int size) : uri_(std::move(uri)), size_(std::max(1, size)) {}

  class Lease {
   public:
    Lease(ConnectionPool* pool, std::unique_ptr<pqxx::connection> connection)
        : pool_(pool), connection_(std::move(connection)) {}
    Lease(Lease&& other) noexcept
        : pool_(std::exchange(other.pool_, nullptr)), connection_(std::move(other.connection_)), broken_(other.broken_) {}
    Lease& operator=(Lease&&) = delete;
    ~Lease() {
      if (pool_ != nullptr) pool_->Release(std::move(connection_), broken_);
    }
    pqxx::connection& operator*() { return *connection_; }
    void MarkBroken() { broken_ = true; }

   private:
    ConnectionPool* pool_;
    std::unique_ptr<pqxx::connection> connection_;
    bool broken_ = false;
  };

  absl::StatusOr<Lease> Acquire() {
    std::unique_lock lock(mutex_);
    available_.wait(lock, [this] { return !idle_.empty() || open_ < size_; });
    if (!idle_.empty()) {
      auto connection = std::move(idle_.back());
      idle_.pop_back();
      return Lease(this, std::move(connection));
    }
    ++open_;
    lock.unlock();
    try {
      return Lease(this, std::make_unique<pqxx::connection>(uri_));
    } catch (const std::exception& error) {
      lock.lock();
      --open_;
      available_.notify_one();
      return Unavailable(error.what());
    }
  }

 private:
  void Release(std::unique_ptr<pqxx::connection> connection, bool broken) {
    std::lock_guard lock(mutex_);
    if (broken || connection == nullptr || !connection->is_open()) {
      --open_;
    } else {
      idle_.push_back(std::move(connection));
    }
    available_.notify_one();
  }

  std::string uri_;
  int size_;
  std::mutex mutex_;
  std::condition_variable available_;
  std::vector<std::unique_ptr<pqxx::connection>> idle_;
  int open_ = 0;
};

// Runs `body(transaction)` in one transaction on a pooled connection and commits when the body
// returns OK. Database errors become statuses: UNAVAILABLE for a lost connection, INTERNAL else.
template <typename Body>
auto InTransaction(ConnectionPool& pool, Body&& body) -> decltype(body(std::declval<pqxx::work&>())) {
  auto connection = pool.Acquire();
  if (!connection.ok()) return connection.status();
  try {
    pqxx::work transaction(**connection);
    auto outcome = body(transaction);
    if (outcome.ok()) transaction.commit();
    return outcome;
  } catch (const pqxx::broken_connection& error) {
    connection->MarkBroken();
    return Unavailable(error.what());
  } catch (const pqxx::in_doubt_error& error) {
    connection->MarkBroken();
    return Unavailable(absl::StrCat("the outcome of a commit is unknown: ", error.what()));
  } catch (const std::exception& error) {
    return InternalError(absl::StrCat("job store (PostgreSQL): ", error.what()));
  }
}

absl::Status Migrate(pqxx::connection& connection, int64_t now_ms) {
  try {
    pqxx::work transaction(connection);
    transaction.exec_params("SELECT pg_advisory_xact_lock($1)", kMigrationLock);
    transaction.exec(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        "version BIGINT PRIMARY KEY, applied_ms BIGINT NOT NULL)");
    const int64_t version = transaction.exec("SELECT COALESCE(MAX(version), 0) FROM schema_migrations")[0][0].as<int64_t>();
    const int64_t latest = kMigrations[std::size(kMigrations) - 1].version;
    if (absl::Status newer = internal::CheckSchemaVersion(version, latest); !newer.ok()) return newer;
    for (const Migration& migration : kMigrations) {
      if (migration.version <= version) continue;
      transaction.exec(migration.sql);
      transaction.exec_params("INSERT INTO schema_migrations (version, applied_ms) VALUES ($1, $2)",
                              migration.version, now_ms);
    }
    transaction.commit();
    return absl::OkStatus();
  } catch (const pqxx::broken_connection& error) {
    return Unavailable(error.what());
  } catch (const std::exception& error) {
    return InternalError(absl::StrCat("job store (PostgreSQL) migration failed: ", error.what()));
  }
}

// LISTEN posbias_jobs on a connection of its own; calls the callback for every notification.
// Reconnects after losing the connection (and then calls the callback once: a notification may
// have been missed).
class Listener {
 public:
  Listener(std::string uri, std::function<void()> callback)
      : uri_(std::move(uri)), callback_(std::move(callback)), thread_([this] { Loop(); }) {}
  ~Listener() {
    stopping_ = true;
    thread_.join();
  }

 private:
  class Receiver final : public pqxx::notification_receiver {
   public:
    Receiver(pqxx::connection& connection, const std::function<void()>& callback)
        : pqxx::notification_receiver(connection, kChannel), callback_(callback) {}
    void operator()(const std::string&, int) override { callback_(); }

   private:
    const std::function<void()>& callback_;
  };

  void Loop() {
    bool first = true;
    while (!stopping_) {
      try {
        pqxx::connection connection(uri_);
        Receiver receiver(connection, callback_);
        if (!first) callback_();
        first = false;
        while (!stopping_) connection.await_notification(0, 200'000);
      } catch (const std::exception&) {
        for (int i = 0; i < 10 && !stopping_; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
  }

  std::string uri_;
  std::function<void()> callback_;
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

constexpr char kNotify[] = "SELECT pg_notify('posbias_jobs', '')";

class PostgresJobStore final : public JobStore {
 public:
  explicit PostgresJobStore(PostgresStoreOptions options)
      : options_(std::move(options)), pool_(options_.uri, options_.connections) {}
  ~PostgresJobStore() override { listener_.reset(); }

  absl::StatusOr<Created> Create(JobRecord job, int64_t max_queued, int64_t max_queued_for_owner = 0,
                                 int64_t max_queued_for_tenant = 0) override {
    const int64_t now = options_.clock();
    const std::string candidate_id = internal::RandomJobId();
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<Created> {
      // Creations are serialized: the request_id look-up and the queue limit are then exact.
      tx.exec_params("SELECT pg_advisory_xact_lock($1)", kCreateLock);
      if (!job.request_id.empty()) {
        const pqxx::result existing =
            tx.exec_params(absl::StrCat("SELECT ", kAllColumns, " FROM jobs WHERE request_id = $1"), job.request_id);
        if (!existing.empty()) {
          absl::StatusOr<JobRecord> found = ReadRecord(existing[0]);
          if (!found.ok()) return found.status();
          return Created{*std::move(found), false};
        }
      }
      if (max_queued > 0) {
        const int64_t queued =
            tx.exec(absl::StrCat("SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND ", kTopLevel))[0][0].as<int64_t>();
        if (queued >= max_queued) return internal::QueueFull(queued, max_queued);
      }
      if (max_queued_for_owner > 0) {  // Under the creation lock: the count and the insert are one step.
        const int64_t queued =
            tx.exec_params(absl::StrCat("SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND owner = $1 AND ", kTopLevel),
                           job.owner)[0][0]
                .as<int64_t>();
        if (queued >= max_queued_for_owner) return internal::QuotaExceeded(job.owner, queued, max_queued_for_owner);
      }
      if (max_queued_for_tenant > 0) {  // Likewise: one tenant's share of the queue, while another tenant queues.
        const auto counts = tx.exec_params(
            absl::StrCat("SELECT COUNT(*) FILTER (WHERE tenant = $1), COUNT(*) FILTER (WHERE tenant <> $1) "
                         "FROM jobs WHERE state = 'queued' AND ", kTopLevel),
            job.tenant)[0];
        const int64_t queued = counts[0].as<int64_t>();
        if (queued >= max_queued_for_tenant && counts[1].as<int64_t>() > 0) {
          return internal::TenantShareFull(job.tenant, queued, max_queued_for_tenant);
        }
      }
      if (job.id.empty()) {
        job.id = candidate_id;
      }
      if (!tx.exec_params("SELECT 1 FROM jobs WHERE id = $1", job.id).empty()) {
        return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kInternalError,
                               absl::StrCat("job ", job.id, " already exists"));
      }
      if (job.created_ms == 0) job.created_ms = now;
      job.state = JobState::kQueued;
      job.updated_ms = now;
      static const std::string kInsert = absl::StrCat(
          "INSERT INTO jobs (", kColumns, internal::kInsertExtraColumns, ") VALUES (",
          internal::InsertPlaceholders([](int i, const std::string& column) {
            return absl::StrCat("$", i + 1, column == "labels_json" ? "::jsonb" : "");
          }),
          ")");
      std::apply([&](const auto&... values) { tx.exec_params(kInsert, values...); }, internal::InsertValues(job));
      // Split by units of work, (model, sample) pairs (jacobian_spec.h WorkUnits): a comparison
      // of several models spreads over workers by model too, even with one sample.
      const int64_t part = options_.part_samples;
      const int64_t units = WorkUnits(job.spec);
      if (part > 0 && units > part) {
        job.parts_total = static_cast<int32_t>((units + part - 1) / part);
        tx.exec_params("UPDATE jobs SET parts_total = $2 WHERE id = $1", job.id, job.parts_total);
        for (int32_t k = 0; k < job.parts_total; ++k) {
          tx.exec_params(
              "INSERT INTO jobs (id, state, priority, created_ms, model, spec_device, spec_json, labels_json, "
              "time_limit_seconds, updated_ms, parent_id, sample_begin, sample_end, tenant, owner, max_running, model_uid) "
              "SELECT $2, 'queued', priority, created_ms, model, spec_device, spec_json, labels_json, "
              "time_limit_seconds, updated_ms, id, $3, $4, tenant, owner, max_running, model_uid FROM jobs WHERE id = $1",
              job.id, absl::StrCat(job.id, ".", k), k * part, std::min<int64_t>(units, (k + 1) * part));
        }
      }
      tx.exec(kNotify);
      return Created{job, true};
    });
  }

  absl::StatusOr<JobRecord> Get(const std::string& id) override {
    return InTransaction(pool_, [&](pqxx::work& tx) { return Load(tx, id, /*lock=*/false); });
  }

  absl::StatusOr<JobPage> List(const ListFilter& filter) override {
    int64_t page_size = filter.page_size == 0 ? 50 : filter.page_size;
    page_size = std::clamp<int64_t>(page_size, 1, 1000);
    std::vector<std::string> values;
    auto placeholder = [&values](std::string value) {
      values.push_back(std::move(value));
      return absl::StrCat("$", values.size());
    };
    std::vector<std::string> conditions = Conditions(filter, placeholder);
    if (!filter.page_token.empty()) {
      absl::StatusOr<std::pair<int64_t, std::string>> after = internal::DecodePageToken(filter.page_token);
      if (!after.ok()) return after.status();
      const std::string created = placeholder(absl::StrCat(after->first));
      const std::string id = placeholder(after->second);
      conditions.push_back(absl::StrCat("(created_ms < ", created, "::bigint OR (created_ms = ", created,
                                        "::bigint AND id < ", id, "))"));
    }
    std::string sql = absl::StrCat("SELECT ", kAllColumns, " FROM jobs");
    if (!conditions.empty()) absl::StrAppend(&sql, " WHERE ", absl::StrJoin(conditions, " AND "));
    absl::StrAppend(&sql, " ORDER BY created_ms DESC, id DESC LIMIT ", page_size + 1);
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<JobPage> {
      const pqxx::result rows = tx.exec_params(sql, pqxx::prepare::make_dynamic_params(values));
      JobPage page;
      for (const pqxx::row& row : rows) {
        if (static_cast<int64_t>(page.jobs.size()) == page_size) {
          const JobRecord& last = page.jobs.back();
          page.next_page_token = internal::EncodePageToken(last.created_ms, last.id);
          break;
        }
        absl::StatusOr<JobRecord> job = ReadRecord(row);
        if (!job.ok()) return job.status();
        page.jobs.push_back(*std::move(job));
      }
      return page;
    });
  }

  absl::StatusOr<std::optional<JobRecord>> ClaimNext(const std::string& worker,
                                                     const std::vector<std::string>& devices,
                                                     const std::string& device_name) override {
    const int64_t now = options_.clock();
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<std::optional<JobRecord>> {
      const pqxx::result claimed = tx.exec_params(
          absl::StrCat(
              "WITH next AS (SELECT id FROM jobs WHERE state = 'queued' AND NOT cancel_requested "
              "AND NOT ", kWaitingForParts, " "
              // The owner's running-jobs quota (a parent claimed to merge is not a new run). Claims
              // of two replicas at the same moment may each take one more.
              "AND (jobs.max_running = 0 OR jobs.parts_total > 0 OR (SELECT COUNT(*) FROM jobs AS r "
              "WHERE r.owner = jobs.owner AND r.parts_total = 0 AND r.state IN ('running', 'cancelling')) "
              "< jobs.max_running) "
              "AND (spec_device = '' OR spec_device = ANY(string_to_array($1, ','))) "
              "ORDER BY ", internal::kTenantTurn, ", priority DESC, created_ms ASC, id ASC LIMIT 1 FOR UPDATE SKIP LOCKED) "
              "UPDATE jobs SET state = 'running', attempt = jobs.attempt + 1, worker = $2, device = $3, "
              "started_ms = CASE WHEN jobs.started_ms = 0 THEN $4 ELSE jobs.started_ms END, updated_ms = $4, "
              "lease_expires_ms = $5 FROM next WHERE jobs.id = next.id RETURNING ",
              Qualified()),
          absl::StrJoin(devices, ","), worker, device_name, now, now + options_.lease_ms);
      if (claimed.empty()) return std::optional<JobRecord>();
      absl::StatusOr<JobRecord> job = ReadRecord(claimed[0]);
      if (!job.ok()) return job.status();
      if (!job->parent_id.empty()) {  // The first part to start starts its parent.
        tx.exec_params(
            "UPDATE jobs SET state = 'running', started_ms = CASE WHEN started_ms = 0 THEN $2 ELSE started_ms END, "
            "updated_ms = $2 WHERE id = $1 AND state = 'queued'",
            job->parent_id, now);
      }
      if (job->parts_total > 0) {  // Claimed to merge: the parts' results in sample order.
        for (const pqxx::row& row : tx.exec_params(
                 "SELECT r.result_json FROM jobs c JOIN results r ON r.job_id = c.id WHERE c.parent_id = $1 "
                 "ORDER BY c.sample_begin",
                 job->id)) {
          job->part_results.push_back(Row(row).Text(0));
        }
      }
      return std::optional<JobRecord>(*std::move(job));
    });
  }

  absl::StatusOr<JobRecord> UpdateProgress(const std::string& id, int32_t attempt,
                                           const ProgressUpdate& update) override {
    const int64_t now = options_.clock();
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<JobRecord> {
      const pqxx::result updated = tx.exec_params(
          absl::StrCat("UPDATE jobs SET progress = $3, samples_done = $4, chunks_done = $5, chunks_total = $6, "
                       "eta_seconds = $7, checkpoint = CASE WHEN $8 = '' THEN checkpoint ELSE $8 END, "
                       "updated_ms = $9, lease_expires_ms = $10, run_ms = CASE WHEN $11 < 0 THEN run_ms ELSE $11 END "
                       "WHERE id = $1 AND attempt = $2 AND state IN ('running', 'cancelling') RETURNING ",
                       kAllColumns),
          id, attempt, update.progress, update.samples_done, update.chunks_done, update.chunks_total,
          update.eta_seconds, update.checkpoint, now, now + options_.lease_ms, update.run_ms);
      if (updated.empty()) return Fenced(tx, id, attempt);
      absl::StatusOr<JobRecord> job = ReadRecord(updated[0]);
      if (job.ok() && !job->parent_id.empty()) {  // The parent shows the samples of all its parts.
        tx.exec_params(
            "UPDATE jobs SET samples_done = s.done, progress = LEAST(1.0, s.done::float8 / GREATEST(1, s.total)), "
            "updated_ms = $2 FROM (SELECT COALESCE(SUM(samples_done), 0) AS done, "
            "COALESCE(SUM(sample_end - sample_begin), 0) AS total FROM jobs WHERE parent_id = $1) AS s "
            "WHERE jobs.id = $1",
            job->parent_id, now);
      }
      return job;
    });
  }

  absl::StatusOr<JobRecord> Transition(const std::string& id, JobState to,
                                       const TransitionOptions& options) override {
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<JobRecord> {
      absl::StatusOr<JobRecord> job = Load(tx, id, /*lock=*/true);
      if (!job.ok()) return job.status();
      if (options.attempt.has_value() && *options.attempt != job->attempt) return NotCurrent(id, *options.attempt);
      if (absl::Status moved = Move(tx, *job, to, options); !moved.ok()) return moved;
      if (job->parts_total > 0 && (to == JobState::kCancelled || to == JobState::kCancelling)) {
        StopParts(tx, id);
      }
      if (job->parts_total > 0) SettleParent(tx, id);
      if (!job->parent_id.empty()) SettleParent(tx, job->parent_id);
      return Load(tx, id, /*lock=*/false);
    });
  }

  absl::StatusOr<JobRecord> Succeed(const std::string& id, int32_t attempt, const std::string& result_json) override {
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<JobRecord> {
      absl::StatusOr<JobRecord> job = Load(tx, id, /*lock=*/true);
      if (!job.ok()) return job.status();
      if (job->attempt != attempt) return NotCurrent(id, attempt);
      if (absl::Status moved = Move(tx, *job, JobState::kSucceeded, TransitionOptions{}); !moved.ok()) return moved;
      tx.exec_params(
          "INSERT INTO results (job_id, result_json) VALUES ($1, $2) "
          "ON CONFLICT (job_id) DO UPDATE SET result_json = EXCLUDED.result_json",
          id, result_json);
      if (!job->parent_id.empty()) SettleParent(tx, job->parent_id);
      return Load(tx, id, /*lock=*/false);
    });
  }

  absl::StatusOr<std::string> GetResult(const std::string& id) override {
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<std::string> {
      absl::StatusOr<JobRecord> job = Load(tx, id, /*lock=*/false);
      if (!job.ok()) return job.status();
      if (job->state != JobState::kSucceeded) return internal::NoResult(id, job->state);
      const pqxx::result rows = tx.exec_params("SELECT result_json FROM results WHERE job_id = $1", id);
      if (rows.empty()) {
        return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kJobNotFinished,
                               absl::StrCat("job ", id, " is succeeded but has no stored result"));
      }
      return Row(rows[0]).Text(0);
    });
  }

  absl::Status Delete(const std::string& id, bool force) override {
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::Status {
      absl::StatusOr<JobRecord> job = Load(tx, id, /*lock=*/true);
      if (!job.ok()) return job.status();
      if (!IsTerminal(job->state) && !force) return internal::StillActive(id, job->state);
      tx.exec_params("DELETE FROM jobs WHERE parent_id = $1", id);  // Its parts (results cascade).
      tx.exec_params("DELETE FROM results WHERE job_id = $1", id);
      tx.exec_params("DELETE FROM jobs WHERE id = $1", id);
      return absl::OkStatus();
    });
  }

  // Other replicas may be running jobs right now: only jobs whose lease expired are recovered.
  absl::StatusOr<int64_t> RecoverAfterRestart() override { return ReapExpiredLeases(); }

  absl::StatusOr<int64_t> ReapExpiredLeases() override {
    const int64_t now = options_.clock();
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
      // An expired lease is a lost attempt; the job that lost too many fails (its parent with it).
      const pqxx::result exhausted = tx.exec_params(
          absl::StrCat("UPDATE jobs SET state = 'failed', worker = '', lease_expires_ms = 0, finished_ms = $1, "
                       "updated_ms = $1, lost_attempts = lost_attempts + 1, error_reason = 'ATTEMPTS_EXHAUSTED', "
                       "error_code = $2, error_message = $3 "
                       "WHERE state = 'running' AND lease_expires_ms < $1 AND lost_attempts + 1 >= $4 AND NOT ",
                       kWaitingForParts, " RETURNING parent_id"),
          now, internal::kAttemptsExhaustedCode, std::string(internal::kAttemptsExhaustedMessage),
          options_.max_lost_attempts);
      const pqxx::result requeued = tx.exec_params(
          absl::StrCat("UPDATE jobs SET state = 'queued', worker = '', lease_expires_ms = 0, updated_ms = $1, "
                       "lost_attempts = lost_attempts + 1 "
                       "WHERE state = 'running' AND lease_expires_ms < $1 AND NOT ", kWaitingForParts),
          now);
      // A cancel asked before the worker was lost wins.
      const pqxx::result cancelled = tx.exec_params(
          absl::StrCat("UPDATE jobs SET state = 'cancelled', worker = '', lease_expires_ms = 0, finished_ms = $1, "
                       "updated_ms = $1 WHERE ((state = 'cancelling' AND lease_expires_ms < $1) "
                       "OR (state = 'queued' AND cancel_requested)) AND NOT ", kWaitingForParts,
                       " RETURNING parent_id"),
          now);
      std::set<std::string> parents;
      for (const pqxx::result* settled : {&cancelled, &exhausted}) {
        for (const pqxx::row& row : *settled) {
          if (!Row(row).Text(0).empty()) parents.insert(Row(row).Text(0));
        }
      }
      for (const std::string& parent : parents) SettleParent(tx, parent);
      if (requeued.affected_rows() > 0) tx.exec(kNotify);
      return static_cast<int64_t>(requeued.affected_rows());
    });
  }

  absl::Status RenewLease(const std::string& id, int32_t attempt) override {
    const int64_t now = options_.clock();
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::Status {
      const pqxx::result renewed = tx.exec_params(
          "UPDATE jobs SET lease_expires_ms = $3 WHERE id = $1 AND attempt = $2 "
          "AND state IN ('running', 'cancelling')",
          id, attempt, now + options_.lease_ms);
      if (renewed.affected_rows() == 0) return Fenced(tx, id, attempt).status();
      return absl::OkStatus();
    });
  }

  int64_t lease_ms() const override { return options_.lease_ms; }

  void OnWorkAvailable(std::function<void()> callback) override {
    listener_.reset();
    if (callback) listener_ = std::make_unique<Listener>(options_.uri, std::move(callback));
  }

  absl::StatusOr<int64_t> PurgeFinishedBefore(int64_t cutoff_ms) override {
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
      const std::string old = absl::StrCat("SELECT id FROM jobs WHERE state IN ('succeeded', 'failed', 'cancelled') "
                                           "AND finished_ms < $1 AND ", kTopLevel);
      tx.exec_params(absl::StrCat("DELETE FROM jobs WHERE parent_id IN (", old, ")"), cutoff_ms);
      const pqxx::result purged = tx.exec_params(absl::StrCat("DELETE FROM jobs WHERE id IN (", old, ")"), cutoff_ms);
      return static_cast<int64_t>(purged.affected_rows());  // Results go with ON DELETE CASCADE.
    });
  }

  absl::StatusOr<std::map<JobState, int64_t>> CountByState() override {
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<std::map<JobState, int64_t>> {
      std::map<JobState, int64_t> counts;
      for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kCancelling, JobState::kSucceeded,
                             JobState::kFailed, JobState::kCancelled}) {
        counts[state] = 0;
      }
      for (const pqxx::row& row :
           tx.exec("SELECT state, COUNT(*) FROM jobs WHERE parts_total = 0 GROUP BY state")) {
        absl::StatusOr<JobState> state = ParseJobState(Row(row).Text(0));
        if (!state.ok()) return InternalError(absl::StrCat("job store: unknown state '", Row(row).Text(0), "'"));
        counts[*state] = Row(row).Int(1);
      }
      return counts;
    });
  }

  absl::StatusOr<int64_t> Count(const ListFilter& filter) override {
    std::vector<std::string> values;
    auto placeholder = [&values](std::string value) {
      values.push_back(std::move(value));
      return absl::StrCat("$", values.size());
    };
    const std::string sql =
        absl::StrCat("SELECT COUNT(*) FROM jobs WHERE ", absl::StrJoin(Conditions(filter, placeholder), " AND "));
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
      return tx.exec_params(sql, pqxx::prepare::make_dynamic_params(values))[0][0].as<int64_t>();
    });
  }

  absl::StatusOr<int64_t> CountQueuedAhead(const JobRecord& job, const std::optional<std::string>& tenant) override {
    const std::string sql = absl::StrCat(
        "SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND ", kTopLevel,
        " AND id <> $1 AND (priority > $2 OR (priority = $2 AND (created_ms < $3 OR (created_ms = $3 AND id < $1))))",
        // Only jobs a worker that could take this one would claim first (any kind: all).
        " AND ($4 = '' OR spec_device = '' OR spec_device = $4)", tenant ? " AND tenant = $5" : "");
    return InTransaction(pool_, [&](pqxx::work& tx) -> absl::StatusOr<int64_t> {
      const pqxx::result rows = tenant ? tx.exec_params(sql, job.id, job.priority, job.created_ms, job.worker_kind, *tenant)
                                       : tx.exec_params(sql, job.id, job.priority, job.created_ms, job.worker_kind);
      return rows[0][0].as<int64_t>();
    });
  }

 private:
  // The WHERE conditions of `filter` (all but its page; top-level jobs only), their values passed
  // through `placeholder` (which returns the value's "$n").
  template <typename Placeholder>
  static std::vector<std::string> Conditions(const ListFilter& filter, Placeholder& placeholder) {
    std::vector<std::string> conditions = {kTopLevel};
    if (!filter.states.empty()) {
      std::vector<std::string> names;
      for (JobState state : filter.states) names.push_back(JobStateName(state));
      conditions.push_back(absl::StrCat("state = ANY(string_to_array(", placeholder(absl::StrJoin(names, ",")), ", ','))"));
    }
    if (!filter.model.empty()) conditions.push_back(absl::StrCat("model = ", placeholder(filter.model)));
    if (filter.bound_to) {
      const ModelBinding& model = *filter.bound_to;
      const std::string name = placeholder(model.name), path = placeholder(model.path), uid = placeholder(model.uid),
                        tenant = placeholder(model.tenant);
      // Its first model, or (comparison jobs, which always record uids) one of its versus models.
      conditions.push_back(absl::StrCat("((model IN (", name, ", ", path, ") AND ((", uid, " <> '' AND model_uid = ", uid,
                                        ") OR (model_uid = '' AND (", tenant, " = '' OR tenant = ", tenant,
                                        " OR model = ", path, ")))) OR (", uid, " <> '' AND (spec_json::jsonb -> 'versus') @> "
                                        "jsonb_build_array(jsonb_build_object('uid', ", uid, "::text))))"));
    }
    if (filter.tenant) conditions.push_back(absl::StrCat("tenant = ", placeholder(*filter.tenant)));
    if (!filter.owner.empty()) conditions.push_back(absl::StrCat("owner = ", placeholder(filter.owner)));
    if (!filter.labels.empty()) {
      conditions.push_back(absl::StrCat("labels_json @> ", placeholder(internal::LabelsJson(filter.labels)), "::jsonb"));
    }
    return conditions;
  }

  // The columns qualified with the table name (for UPDATE ... FROM ... RETURNING), built once.
  static const std::string& Qualified() {
    static const std::string qualified = [] {
      std::string out = "jobs.";
      for (char c : kAllColumns) {
        out.push_back(c);
        if (c == ' ' && out.size() >= 2 && out[out.size() - 2] == ',') out += "jobs.";
      }
      return out;
    }();
    return qualified;
  }

  static absl::StatusOr<JobRecord> Load(pqxx::work& tx, const std::string& id, bool lock) {
    const pqxx::result rows = tx.exec_params(
        absl::StrCat("SELECT ", kAllColumns, " FROM jobs WHERE id = $1", lock ? " FOR UPDATE" : ""), id);
    if (rows.empty()) return NotFound(id);
    return ReadRecord(rows[0]);
  }

  // Why a fenced write matched no row: the job is gone, or the attempt is not current.
  static absl::StatusOr<JobRecord> Fenced(pqxx::work& tx, const std::string& id, int32_t attempt) {
    if (tx.exec_params("SELECT 1 FROM jobs WHERE id = $1", id).empty()) return NotFound(id);
    return NotCurrent(id, attempt);
  }

  // Cancels a parent's queued parts and asks its running parts to stop at their next chunk.
  void StopParts(pqxx::work& tx, const std::string& parent_id) {
    const int64_t now = options_.clock();
    tx.exec_params(
        "UPDATE jobs SET state = 'cancelled', worker = '', lease_expires_ms = 0, finished_ms = $2, updated_ms = $2 "
        "WHERE parent_id = $1 AND state = 'queued'",
        parent_id, now);
    tx.exec_params(
        "UPDATE jobs SET state = 'cancelling', cancel_requested = TRUE, updated_ms = $2 "
        "WHERE parent_id = $1 AND state = 'running'",
        parent_id, now);
  }

  // After a part changed state: a failed part fails its parent (and cancels the other parts); a
  // cancelling parent without active parts becomes CANCELLED; a parent whose parts all succeeded
  // goes back to the queue, for a worker to merge them.
  void SettleParent(pqxx::work& tx, const std::string& parent_id) {
    absl::StatusOr<JobRecord> parent = Load(tx, parent_id, /*lock=*/true);
    if (!parent.ok() || IsTerminal(parent->state)) return;
    const pqxx::row counts = tx.exec_params1(
        "SELECT COUNT(*) FILTER (WHERE state = 'succeeded'), "
        "COUNT(*) FILTER (WHERE state IN ('queued', 'running', 'cancelling')), "
        "COUNT(*) FILTER (WHERE state = 'failed') FROM jobs WHERE parent_id = $1",
        parent_id);
    const int64_t succeeded = counts[0].as<int64_t>(), active = counts[1].as<int64_t>(), failed = counts[2].as<int64_t>();
    const int64_t now = options_.clock();
    tx.exec_params("UPDATE jobs SET parts_done = $2, updated_ms = $3 WHERE id = $1", parent_id, succeeded, now);
    if (failed > 0) {
      const pqxx::row part = tx.exec_params1(
          "SELECT id, error_reason, error_message, error_code FROM jobs WHERE parent_id = $1 AND state = 'failed' "
          "ORDER BY sample_begin LIMIT 1",
          parent_id);
      TransitionOptions failure;
      failure.error_reason = Row(part).Text(1);
      failure.error_message = absl::StrCat("part ", Row(part).Text(0), ": ", Row(part).Text(2));
      failure.error_code = static_cast<int32_t>(Row(part).Int(3));
      if (Move(tx, *parent, JobState::kFailed, failure).ok()) {
        StopParts(tx, parent_id);
      }
    } else if (parent->state == JobState::kCancelling || (parent->state == JobState::kQueued && active == 0 &&
                                                           succeeded < parent->parts_total)) {
      if (active == 0) (void)Move(tx, *parent, JobState::kCancelled, TransitionOptions{});
    } else if (succeeded == parent->parts_total && parent->state == JobState::kRunning) {
      (void)Move(tx, *parent, JobState::kQueued, TransitionOptions{});
    }
  }

  // Applies `job.state -> to` with its side effects; the caller holds the row lock and has checked
  // the attempt.
  absl::Status Move(pqxx::work& tx, const JobRecord& job, JobState to, const TransitionOptions& options) {
    if (!IsAllowedTransition(job.state, to)) return Refused(job.id, job.state, to);
    const int64_t now = options_.clock();
    const bool failed = to == JobState::kFailed;
    const bool succeeded = to == JobState::kSucceeded;
    const bool queued = to == JobState::kQueued;
    tx.exec_params(
        "UPDATE jobs SET state = $2, updated_ms = $3, "
        "finished_ms = CASE WHEN $4 THEN $3 ELSE finished_ms END, "
        "worker = CASE WHEN $5 THEN '' ELSE worker END, "
        "lease_expires_ms = CASE WHEN $4 OR $5 THEN 0 ELSE lease_expires_ms END, "
        "cancel_requested = CASE WHEN $6 THEN TRUE ELSE cancel_requested END, "
        "error_reason = CASE WHEN $7 THEN $8 ELSE error_reason END, "
        "error_message = CASE WHEN $7 THEN $9 ELSE error_message END, "
        "error_code = CASE WHEN $7 THEN $10 ELSE error_code END, "
        "progress = CASE WHEN $11 THEN 1 ELSE progress END, "
        "eta_seconds = CASE WHEN $11 THEN 0 ELSE eta_seconds END "
        "WHERE id = $1",
        job.id, JobStateName(to), now, IsTerminal(to), queued, to == JobState::kCancelling, failed,
        options.error_reason, options.error_message, options.error_code, succeeded);
    if (queued) tx.exec(kNotify);
    return absl::OkStatus();
  }

  PostgresStoreOptions options_;
  ConnectionPool pool_;
  std::unique_ptr<Listener> listener_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<JobStore>> OpenPostgresJobStore(PostgresStoreOptions options) {
  if (!options.clock) options.clock = SystemClock();
  if (options.lease_ms <= 0) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "lease_ms", absl::StrCat(options.lease_ms), "> 0"});
  }
  try {
    pqxx::connection connection(options.uri);
    if (absl::Status migrated = Migrate(connection, options.clock()); !migrated.ok()) return migrated;
  } catch (const std::exception& error) {
    return Unavailable(error.what());
  }
  return std::unique_ptr<JobStore>(std::make_unique<PostgresJobStore>(std::move(options)));
}

}  // namespace posbias::jobs
