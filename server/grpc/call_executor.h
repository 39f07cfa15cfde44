// The threads that do the work of the services' calls. gRPC's callback API delivers calls on its
// own few threads, which must never block; each call's work is handed to this executor: a fixed
// number of threads and a bounded queue of waiting work. A call that finds the queue full is
// refused at once (RESOURCE_EXHAUSTED / SERVER_BUSY) instead of waiting without bound, so a burst
// queues and a flood is told to back off, and no call holds a thread while it waits.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "server/limits/limits.h"

namespace posbias::service {

class CallExecutor {
 public:
  struct Options {
    int threads = limits::Default<int>(limits::Limit::kRpcThreads);  // Calls worked on at once.
    // Calls waiting for a thread; beyond: SERVER_BUSY.
    int64_t max_queued = limits::Default<int64_t>(limits::Limit::kMaxWaitingCalls);
  };
  explicit CallExecutor(Options options);
  ~CallExecutor();  // Runs what is queued, then joins.
  CallExecutor(const CallExecutor&) = delete;
  CallExecutor& operator=(const CallExecutor&) = delete;

  // Queues `work`; false (and `work` is dropped) when the queue is full or the executor stopped.
  bool TrySubmit(std::function<void()> work);
  // Stops taking work; queued work still runs. Joins the threads.
  void Stop();
  const Options& options() const { return options_; }

 private:
  void Loop();

  Options options_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace posbias::service
