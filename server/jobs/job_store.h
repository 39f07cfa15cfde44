// JobStore: the durable queue. Every transition is one atomic operation of the store, so jobs
// survive restarts and nothing accepted is lost. Two implementations: the embedded SQLite store
// (one process; WAL, schema migrations) and the shared PostgreSQL store (any number of server
// processes on one database: claims with FOR UPDATE SKIP LOCKED, leases renewed by heartbeat, a
// reaper for expired leases, the attempt number as fencing token, LISTEN/NOTIFY wake-ups).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/jobs/job.h"

namespace posbias::jobs {

// Milliseconds since the Unix epoch; tests pass a fake.
using Clock = std::function<int64_t()>;
Clock SystemClock();

// A registered model as its jobs name it, to find the jobs bound to it (ListFilter::bound_to). A
// job names the model as its submitter saw it: `name` (their tenant's or a public model) or `path`
// ("tenant/name": an admin's job on a tenant's model). It is bound to this registration when it
// recorded `uid`; a job stored before uids were recorded is bound when the name and namespace fit
// (a public model, the job's tenant is the model's, or the job named `path`).
struct ModelBinding {
  std::string name;
  std::string path;    // "tenant/name"; the name for a public model.
  std::string uid;     // The registration's uid.
  std::string tenant;  // "" = a public model.
};

struct ListFilter {
  std::vector<JobState> states;              // Empty = any.
  std::string model;                         // "" = any.
  std::optional<ModelBinding> bound_to;      // Only the jobs bound to this registration.
  std::map<std::string, std::string> labels; // All must match.
  std::optional<std::string> tenant;         // Only this tenant's jobs; nullopt = every tenant.
  std::string owner;                         // "" = any.
  int32_t page_size = 50;                    // 1..1000 (clamped); 0 = 50.
  std::string page_token;                    // From the previous page; "" = first.
};

struct JobPage {
  std::vector<JobRecord> jobs;  // Newest first (created_ms desc, id desc).
  std::string next_page_token;  // "" = last page.
};

struct ProgressUpdate {
  double progress = 0;
  int64_t samples_done = 0;
  int64_t chunks_done = 0;
  int64_t chunks_total = 0;
  double eta_seconds = -1;
  std::string checkpoint;  // Replaces the stored checkpoint when non-empty.
  int64_t run_ms = -1;     // The job's run time so far, all attempts (JobRecord::run_ms); < 0 = unchanged.
};

class JobStore {
 public:
  virtual ~JobStore() = default;

  // Inserts `job` as QUEUED (id, created_ms assigned by the store when empty/0). If job.request_id
  // is non-empty and a job with that request_id exists, returns that job and created = false
  // (no second job). RESOURCE_EXHAUSTED with reason QUEUE_FULL when `max_queued` jobs are QUEUED.
  struct Created {
    JobRecord job;
    bool created = false;
  };
  // `max_queued_for_owner` > 0: RESOURCE_EXHAUSTED with reason QUOTA_EXCEEDED when job.owner has
  // that many QUEUED jobs; counted and inserted in one transaction, so concurrent submissions of
  // one principal cannot pass the quota together. `max_queued_for_tenant` > 0: RESOURCE_EXHAUSTED
  // with reason QUEUE_FULL when job.tenant has that many QUEUED jobs (its share of the queue) and
  // another tenant has a QUEUED job too, in the same transaction: the share binds only under
  // contention, so a tenant alone may fill the whole queue (max_queued).
  virtual absl::StatusOr<Created> Create(JobRecord job, int64_t max_queued, int64_t max_queued_for_owner = 0,
                                         int64_t max_queued_for_tenant = 0) = 0;

  // NOT_FOUND with reason JOB_NOT_FOUND for an unknown id.
  virtual absl::StatusOr<JobRecord> Get(const std::string& id) = 0;
  virtual absl::StatusOr<JobPage> List(const ListFilter& filter) = 0;

  // Atomically claims the QUEUED job with the highest priority, then the oldest (created_ms, id),
  // whose worker_kind is "" or one of `devices`: state RUNNING, attempt + 1, worker, device,
  // started_ms (first start only). nullopt when none waits.
  virtual absl::StatusOr<std::optional<JobRecord>> ClaimNext(const std::string& worker,
                                                             const std::vector<std::string>& devices,
                                                             const std::string& device_name) = 0;

  // Progress of a RUNNING/CANCELLING job, fenced: ABORTED when the job's attempt is no longer
  // `attempt` (a newer attempt owns it) or it is not active. Returns the job after the update (a
  // worker reads its state to see a cancel).
  virtual absl::StatusOr<JobRecord> UpdateProgress(const std::string& id, int32_t attempt,
                                                   const ProgressUpdate& update) = 0;

  // Moves a job to `to` if the transition is allowed (FAILED_PRECONDITION with reason
  // JOB_NOT_FINISHED otherwise, naming both states). When `attempt` is set, the job's attempt must
  // match (ABORTED otherwise). Terminal states set finished_ms; QUEUED clears worker. Error fields
  // are stored for FAILED.
  struct TransitionOptions {
    std::optional<int32_t> attempt;
    std::string error_reason;
    std::string error_message;
    int32_t error_code = 0;
  };
  virtual absl::StatusOr<JobRecord> Transition(const std::string& id, JobState to,
                                               const TransitionOptions& options) = 0;

  // Stores the result JSON and moves the job to SUCCEEDED in one transaction, fenced by attempt.
  virtual absl::StatusOr<JobRecord> Succeed(const std::string& id, int32_t attempt,
                                            const std::string& result_json) = 0;
  // NOT_FOUND (JOB_NOT_FOUND) for an unknown job; FAILED_PRECONDITION (JOB_NOT_FINISHED) when it
  // has no result (not SUCCEEDED).
  virtual absl::StatusOr<std::string> GetResult(const std::string& id) = 0;

  // Deletes a job and its result. FAILED_PRECONDITION (JOB_NOT_FINISHED) for an active job unless
  // `force`.
  virtual absl::Status Delete(const std::string& id, bool force) = 0;

  // Start-up recovery: RUNNING jobs go back to QUEUED (keeping attempt and checkpoint), or FAIL
  // with ATTEMPTS_EXHAUSTED when their attempts were lost max_lost_attempts times; CANCELLING jobs
  // become CANCELLED. Returns how many were re-queued.
  virtual absl::StatusOr<int64_t> RecoverAfterRestart() = 0;

  // Deletes terminal jobs (and results) finished before `cutoff_ms`. Returns how many.
  virtual absl::StatusOr<int64_t> PurgeFinishedBefore(int64_t cutoff_ms) = 0;

  // Leases. A claim holds the job for lease_ms(); its worker renews the lease while it runs.
  // ABORTED when `attempt` is no longer the job's current attempt or the job is not active (the
  // worker must stop and write nothing). A store without leases (lease_ms() == 0) only checks.
  virtual absl::Status RenewLease(const std::string& id, int32_t attempt) = 0;
  // Puts RUNNING jobs whose lease expired back in the queue (their attempt stays, so the stale
  // worker is fenced out), or FAILS them with ATTEMPTS_EXHAUSTED when their attempts were lost
  // max_lost_attempts times, and ends CANCELLING ones as CANCELLED. Returns how many were re-queued.
  virtual absl::StatusOr<int64_t> ReapExpiredLeases() = 0;
  // The lease duration in milliseconds; 0 for a store used by one process only (recovery at
  // start-up replaces leases).
  virtual int64_t lease_ms() const { return 0; }
  // `callback` runs (on a store thread) when another process may have queued work. Stores that
  // only one process uses never call it.
  virtual void OnWorkAvailable(std::function<void()> callback) { (void)callback; }

  // Units of work by state: jobs, except that a job split into sample parts counts as its parts
  // (so queue depth and running work say how many workers could be busy).
  virtual absl::StatusOr<std::map<JobState, int64_t>> CountByState() = 0;
  // Number of jobs `filter` selects, as List would return them over all pages (its page fields
  // are ignored): one COUNT in the store, no records read.
  virtual absl::StatusOr<int64_t> Count(const ListFilter& filter) = 0;
  // Number of QUEUED jobs ClaimNext would take before `job` (higher priority, or equal priority and
  // older: the claim order), of `tenant`'s jobs only when given: a queued job's queue position.
  // For a job of one worker kind, only the jobs that kind of worker claims (its kind or any).
  virtual absl::StatusOr<int64_t> CountQueuedAhead(const JobRecord& job, const std::optional<std::string>& tenant) = 0;
};

// Opens (creating if needed) the SQLite store at `path` (":memory:" for tests): WAL journal,
// busy timeout, and versioned schema migrations applied in a transaction.
// `max_lost_attempts`: see kDefaultMaxLostAttempts (job.h); RecoverAfterRestart counts the losses.
absl::StatusOr<std::unique_ptr<JobStore>> OpenSqliteJobStore(const std::string& path, Clock clock = SystemClock(),
                                                             int max_lost_attempts = kDefaultMaxLostAttempts);

struct PostgresStoreOptions {
  std::string uri;              // libpq connection URI or key=value string.
  int64_t lease_ms = 30'000;    // How long a claim holds a job without a renewal.
  int connections = 4;          // Pooled connections for store operations (plus one listener).
  // Jobs with more units of work than this (samples, times the models of a comparison job) are
  // split into parts of this many units that workers run in parallel and the last one merges
  // (job.h); 0 = never split.
  int64_t part_samples = 0;
  Clock clock = SystemClock();  // Timestamps and leases; replicas need synchronized clocks.
  // Lost attempts (expired leases) after which a job fails with ATTEMPTS_EXHAUSTED (job.h).
  int max_lost_attempts = kDefaultMaxLostAttempts;
};
// Connects to PostgreSQL and applies the versioned schema migrations (serialized across
// replicas by an advisory lock, so several may start at once). UNAVAILABLE when the server cannot
// be reached.
absl::StatusOr<std::unique_ptr<JobStore>> OpenPostgresJobStore(PostgresStoreOptions options);

// Every job `filter` selects (its page_size and page_token ignored), page after page, newest
// first, each handed to `visit`. The first failed page's status stops the walk (the jobs before it
// were visited).
absl::Status ForEachJob(JobStore& store, ListFilter filter, const std::function<void(JobRecord&)>& visit);

// DeleteModel with force: every tenant's jobs bound to `model` end or are asked to stop: a queued
// one is CANCELLED, a running one CANCELLING (its worker stops it). Returns the ids the store
// moved, newest first; a job that ended between the listing and its transition keeps its end. A
// page the store cannot read ends the search with what was found.
std::vector<std::string> CancelJobsBoundTo(JobStore& store, const ModelBinding& model);

// Chooses the store from a connection string: "" → SQLite at `default_sqlite_path`;
// "sqlite:PATH" or "sqlite://PATH" → SQLite at PATH; "postgresql://…" or "postgres://…" →
// PostgreSQL. INVALID_ARGUMENT for anything else.
// `part_samples` applies to PostgreSQL (see PostgresStoreOptions).
absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const std::string& connection,
                                                       const std::string& default_sqlite_path,
                                                       int64_t lease_ms = 30'000, int64_t part_samples = 0,
                                                       int max_lost_attempts = kDefaultMaxLostAttempts);

}  // namespace posbias::jobs
