// Workers: one per device (each CUDA device, and the CPU), each claiming the next job from the
// store (priority, then first in, first out), running it through a JobRunner and recording the
// outcome. Per-job time limits; cancellation and shutdown are seen at the next chunk.
//
// With a shared store (leases), a heartbeat renews the lease of each running job every lease/3;
// when the store answers that a newer attempt owns the job, the runner is stopped at its next chunk
// and nothing of this attempt is written. Idle workers wake on the store's work notifications.
//
// Shutdown drains: Stop() asks every running job to stop at its next chunk; its checkpoint is
// already in the store, so it is re-queued and resumes where it stopped after a restart.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "server/threads/periodic_task.h"
#include "server/jobs/job_store.h"

namespace posbias::jobs {

// Runs one claimed job. `report` stores progress (and a checkpoint); it returns false when the
// runner must stop now (cancelled, shutting down, time limit, or a newer attempt took over), and
// the runner then returns any non-OK status.
class JobRunner {
 public:
  virtual ~JobRunner() = default;
  virtual absl::StatusOr<std::string> Run(const JobRecord& job,
                                          const std::function<bool(const ProgressUpdate&)>& report) = 0;
};

struct WorkerSpec {
  std::string name;         // e.g. "cpu-0".
  std::string device_kind;  // "cpu" or "cuda": which jobs it may claim.
  std::string device_name;  // e.g. "cpu", "cuda:0".
};

// Counters the metrics room exports (called from worker threads).
struct WorkerObserver {
  std::function<void(const JobRecord&, const std::string& outcome, double run_seconds)> finished;
  std::function<void(double wait_seconds)> started;
};

class WorkerPool {
 public:
  struct Options {
    std::vector<WorkerSpec> workers;
    int64_t idle_poll_ms = 500;  // Also woken at once by Wake().
    // How long a job's final write (result or end state) is retried while the store is
    // unavailable; after that the job stays RUNNING until its lease runs out and runs again.
    int64_t final_write_retry_ms = 30'000;
    // A final write the store refused otherwise (a full disk, a broken transaction) is not
    // dropped: it is kept and tried again this often, in the background, until the store takes
    // it or says the attempt is no longer the job's (a worker of a store without leases would
    // otherwise leave the job RUNNING until a restart). The worker goes on with the next job.
    int64_t backlog_retry_ms = 5'000;
  };
  WorkerPool(JobStore* store, JobRunner* runner, Options options, WorkerObserver observer = {});
  ~WorkerPool();

  void Start();
  // Wakes idle workers (a job was submitted).
  void Wake();
  // Stops claiming, asks running jobs to stop at their next chunk (they are re-queued), joins.
  void Stop();

 private:
  void Loop(const WorkerSpec& spec);
  void RunOne(const WorkerSpec& spec, const JobRecord& job);
  absl::StatusOr<std::string> RunGuarded(const JobRecord& job, const std::function<bool(const ProgressUpdate&)>& report);
  class Heartbeat;
  absl::Status WithRetries(const std::function<absl::Status()>& write);
  // Keeps a final write that failed for the backlog thread (see Options::backlog_retry_ms).
  void KeepForRetry(const std::string& job_id, std::function<absl::Status()> write);
  void Finalize(const std::string& job_id, std::function<absl::Status()> write);
  bool TryBacklogOnce();  // One pass; true when the backlog is empty afterwards.
  struct PendingWrite {
    std::string job_id;
    std::function<absl::Status()> write;
  };

  JobStore* store_;
  JobRunner* runner_;
  Options options_;
  WorkerObserver observer_;
  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<std::thread> threads_;
  std::mutex backlog_mutex_;
  std::vector<PendingWrite> backlog_;  // Guarded by backlog_mutex_.
  threads::PeriodicTask backlog_retry_;

 public:
  int64_t backlog_size();  // Final writes waiting for the store (for metrics and tests).
};

}  // namespace posbias::jobs
