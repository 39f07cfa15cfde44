#include "server/grpc/call_executor.h"

#include <utility>

namespace posbias::service {

CallExecutor::CallExecutor(Options options) : options_(options) {
  for (int i = 0; i < options_.threads; ++i) threads_.emplace_back([this] { Loop(); });
}

CallExecutor::~CallExecutor() { Stop(); }

bool CallExecutor::TrySubmit(std::function<void()> work) {
  {
    std::lock_guard lock(mutex_);
    if (stopping_ || static_cast<int64_t>(queue_.size()) >= options_.max_queued) return false;
    queue_.push_back(std::move(work));
  }
  wake_.notify_one();
  return true;
}

void CallExecutor::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
}

void CallExecutor::Loop() {
  while (true) {
    std::function<void()> work;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // Stopping, and nothing left to run.
      work = std::move(queue_.front());
      queue_.pop_front();
    }
    work();
  }
}

}  // namespace posbias::service
