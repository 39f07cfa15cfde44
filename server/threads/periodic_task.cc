#include "server/threads/periodic_task.h"

#include <utility>

namespace posbias::threads {

void PeriodicTask::Start(const Options& options, std::function<void()> task) {
  if (thread_.joinable() || stopping()) return;  // Started once; a stopped task stays stopped.
  thread_ = std::thread([this, options, task = std::move(task)] {
    std::unique_lock lock(mutex_);
    if (options.run_first && !stopping_) {
      lock.unlock();
      task();
      lock.lock();
    }
    while (true) {
      ++waits_begun_;
      wake_.wait_for(lock, options.interval, [this] { return stopping_ || woken_; });
      if (stopping_) return;
      woken_ = false;
      lock.unlock();
      task();
      lock.lock();
    }
  });
}

void PeriodicTask::Wake() {
  {
    std::lock_guard lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
}

void PeriodicTask::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

int64_t PeriodicTask::waits_begun() const {
  std::lock_guard lock(mutex_);
  return waits_begun_;
}

bool PeriodicTask::stopping() const {
  std::lock_guard lock(mutex_);
  return stopping_;
}

}  // namespace posbias::threads
