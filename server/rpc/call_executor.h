// The threads that do the work of the services' calls. gRPC's callback API delivers calls on its
// own few threads, which must never block; each call's work is handed to this executor: a fixed
// number of threads and a bounded queue of waiting work. A call that finds the queue full is
// refused at once (RESOURCE_EXHAUSTED / SERVER_BUSY) instead of waiting without bound, so a burst
// queues and a flood is told to back off, and no call holds a thread while it waits.
//
// Fair between tenants, and work-conserving: waiting work is queued per tenant, and a free thread
// takes the next work of the tenants in turn (round robin), first among the tenants that run less
// than their share of the threads (Options::tenant_share, at least one thread); only when none of
// those waits does it take work of a tenant beyond its share. So a tenant alone uses every
// thread, and once another tenant's call waits, the next free thread is its: a tenant whose calls
// are slow (a large text to tokenize, a model to build) keeps no more than its share while others
// wait, and another tenant's call waits at most for the first running call to end and for one
// call of each tenant ahead of it, never behind a flood.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/limits/limits.h"

namespace posbias::rpc {

class CallExecutor {
 public:
  struct Options {
    int threads = limits::Default<int>(limits::Limit::kRpcThreads);  // Calls worked on at once.
    // Calls waiting for a thread, all tenants together; beyond: SERVER_BUSY.
    int64_t max_queued = limits::Default<int64_t>(limits::Limit::kMaxWaitingCalls);
    // Fraction of the threads one tenant's calls may hold at once (at least one thread).
    double tenant_share = limits::Default<double>(limits::Limit::kTenantShare);
  };
  explicit CallExecutor(Options options);
  ~CallExecutor();  // Runs what is queued, then joins.
  CallExecutor(const CallExecutor&) = delete;
  CallExecutor& operator=(const CallExecutor&) = delete;

  // Queues `work` of `tenant`'s call; false (and `work` is dropped) when the queue is full or the
  // executor stopped.
  bool TrySubmit(const std::string& tenant, std::function<void()> work);
  // Stops taking work; queued work still runs. Joins the threads.
  void Stop();
  const Options& options() const { return options_; }
  // Threads one tenant may hold at once.
  int threads_per_tenant() const { return threads_per_tenant_; }

 private:
  struct Tenant {
    std::deque<std::function<void()>> waiting;
    int running = 0;
  };
  void Loop();
  // The next work a free thread may take (the turn moves past its tenant); false when every
  // tenant with waiting work runs its share. Under mutex_.
  bool TakeNext(std::function<void()>* work, std::string* tenant);

  Options options_;
  int threads_per_tenant_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, Tenant> tenants_;  // Those with waiting or running work.
  std::string turn_;                       // The tenant served last: the next after it goes first.
  int64_t waiting_ = 0;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace posbias::rpc
