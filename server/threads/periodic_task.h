// PeriodicTask: one thread that runs a task every interval until stopped. The server's pollers
// (the housekeeper, lease heartbeats, the write-backlog retry, job watches, the upload watchdog and
// the tokens file's reload) are all one of these, so the stop flag, the condition variable and
// the join are written once.
//
// States: idle -> (Start) running -> (Stop or destruction) stopped. Stop wakes the wait at once,
// so it returns within one run of the task; it is idempotent and may race with Wake.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace posbias::threads {

class PeriodicTask {
 public:
  struct Options {
    std::chrono::milliseconds interval{1000};  // Between the end of one run and the next.
    bool run_first = false;                    // Run once at Start, before the first wait.
  };

  PeriodicTask() = default;
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;
  ~PeriodicTask() { Stop(); }

  // Starts the thread (once; not after Stop): `task` runs every options.interval until Stop.
  void Start(const Options& options, std::function<void()> task);
  // Ends the current wait early: the task runs now (no-op when stopped).
  void Wake();
  // Ends the thread after the run in progress, if any, and joins it.
  void Stop();
  bool stopping() const;
  // How many waits between runs the thread has begun: tests wait on it to know the task is
  // waiting (it has run what it will run before the wait).
  int64_t waits_begun() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  bool woken_ = false;
  int64_t waits_begun_ = 0;
  std::thread thread_;
};

}  // namespace posbias::threads
