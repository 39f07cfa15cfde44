// The housekeeper: the store's periodic chores, in every replica. Each round reaps the jobs whose
// worker lost its lease (shared store: cheap, one indexed UPDATE, so jobs of a lost worker come
// back within about 1.5 leases even when only API replicas are left) and, once per purge
// interval, deletes finished jobs older than the retention.
//
// Lifecycle: constructed -> Start() (a thread runs Round() every tick) -> Stop() (joins; also on
// destruction). Round() may be called directly: tests drive it with an injected clock.
#pragma once

#include <cstdint>
#include <functional>

#include "server/threads/periodic_task.h"
#include "server/jobs/job_store.h"

namespace posbias::jobs {

class Housekeeper {
 public:
  struct Options {
    double retention_hours = 24 * 7;              // Finished jobs are deleted after this.
    int64_t purge_interval_ms = 3'600'000;        // How often finished jobs are purged.
    std::function<void(int64_t reaped)> on_reaped = nullptr;  // Jobs re-queued from lost leases.
  };
  struct RoundResult {
    int64_t reaped = 0;  // Jobs re-queued because their lease expired.
    int64_t purged = 0;  // Finished jobs deleted past the retention.
  };

  // `store` outlives the housekeeper; `clock` gives Unix ms.
  Housekeeper(JobStore* store, Options options, Clock clock = SystemClock());
  ~Housekeeper();
  Housekeeper(const Housekeeper&) = delete;
  Housekeeper& operator=(const Housekeeper&) = delete;

  // One round of chores; the first one purges, later ones when the purge interval has passed.
  RoundResult Round();
  // Rounds every lease / 2 with a shared store, every purge interval otherwise.
  void Start();
  void Stop();

 private:
  JobStore* store_;
  Options options_;
  Clock clock_;
  int64_t next_purge_ms_ = 0;  // Unix ms; 0 = at the first round.
  threads::PeriodicTask task_;
};

}  // namespace posbias::jobs
