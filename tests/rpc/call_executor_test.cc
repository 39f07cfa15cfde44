// The call executor (server/rpc/call_executor.h): a bounded queue, fair between tenants and
// work-conserving: a tenant alone uses every thread, and once another tenant's call waits, the
// next free thread is its, not the flood's.
#include "server/rpc/call_executor.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace posbias::rpc {
namespace {
using namespace std::chrono_literals;

// Work that blocks until released (a slow call: a large text to tokenize, a model to build):
// all of it at once (Open), or one call at a time (Release).
class Gate {
 public:
  void Wait() {
    std::unique_lock lock(mutex_);
    ++waiting_;
    changed_.notify_all();
    changed_.wait(lock, [&] { return open_ || released_ > 0; });
    if (!open_) --released_;
  }
  void Open() {
    std::lock_guard lock(mutex_);
    open_ = true;
    changed_.notify_all();
  }
  void Release(int calls) {
    std::lock_guard lock(mutex_);
    released_ += calls;
    changed_.notify_all();
  }
  bool WaitForWaiting(int count) {
    std::unique_lock lock(mutex_);
    return changed_.wait_for(lock, 5s, [&] { return waiting_ >= count; });
  }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  int waiting_ = 0;
  int released_ = 0;
  bool open_ = false;
};

TEST(CallExecutor, ATenantAloneUsesEveryThreadAndTheNextFreeOneGoesToAnotherTenantThatWaits) {
  CallExecutor executor({.threads = 4, .max_queued = 100, .tenant_share = 0.5});
  EXPECT_EQ(executor.threads_per_tenant(), 2);
  Gate gate;
  std::atomic<int> flood_started{0};
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(executor.TrySubmit("lab-a", [&] {
      ++flood_started;
      gate.Wait();
    }));
  }
  ASSERT_TRUE(gate.WaitForWaiting(4)) << "lab-a, alone, runs on all four threads, not only its share of two";
  std::atomic<bool> served{false};
  std::atomic<int> flood_started_before_b{-1};
  std::mutex mutex;
  std::condition_variable done;
  ASSERT_TRUE(executor.TrySubmit("lab-b", [&] {
    flood_started_before_b = flood_started.load();
    std::lock_guard lock(mutex);
    served = true;
    done.notify_all();
  }));
  gate.Release(1);  // One of lab-a's calls ends: its thread is lab-b's, who waits below its share.
  {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(done.wait_for(lock, 5s, [&] { return served.load(); })) << "lab-b waited behind lab-a's flood";
  }
  EXPECT_EQ(flood_started_before_b.load(), 4) << "the freed thread went to lab-b, not to lab-a's fifth call";
  gate.Open();
  executor.Stop();
  EXPECT_EQ(flood_started.load(), 10) << "queued work still runs when the executor stops";
}

TEST(CallExecutor, TenantsTakeTurnsWhenEveryThreadIsBusy) {
  CallExecutor executor({.threads = 1, .max_queued = 100, .tenant_share = 1.0});
  Gate gate;
  std::mutex mutex;
  std::vector<std::string> order;
  ASSERT_TRUE(executor.TrySubmit("lab-a", [&] { gate.Wait(); }));
  ASSERT_TRUE(gate.WaitForWaiting(1));
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE(executor.TrySubmit("lab-a", [&, i] {
      std::lock_guard lock(mutex);
      order.push_back("a" + std::to_string(i));
    }));
  }
  ASSERT_TRUE(executor.TrySubmit("lab-b", [&] {
    std::lock_guard lock(mutex);
    order.push_back("b");
  }));
  gate.Open();
  executor.Stop();
  EXPECT_EQ(order, (std::vector<std::string>{"b", "a0", "a1", "a2"})) << "lab-a was served last: lab-b's turn";
}

TEST(CallExecutor, AFullQueueRefusesAtOnce) {
  CallExecutor executor({.threads = 1, .max_queued = 2, .tenant_share = 1.0});
  Gate gate;
  ASSERT_TRUE(executor.TrySubmit("lab-a", [&] { gate.Wait(); }));
  ASSERT_TRUE(gate.WaitForWaiting(1));
  EXPECT_TRUE(executor.TrySubmit("lab-a", [] {}));
  EXPECT_TRUE(executor.TrySubmit("lab-b", [] {}));
  EXPECT_FALSE(executor.TrySubmit("lab-c", [] {})) << "two wait, all tenants together";
  gate.Open();
}

}  // namespace
}  // namespace posbias::rpc
