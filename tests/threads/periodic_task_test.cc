// The periodic task every poller of the server runs on: it runs on time, at once when woken, and
// stops promptly however long its interval.
#include "server/host/periodic.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace posbias::host {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// Waits up to 10 s for `done`; true when it came.
template <typename Predicate>
bool Eventually(Predicate done) {
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(1));
  }
  return true;
}

TEST(PeriodicTask, RunsEveryIntervalUntilStopped) {
  std::atomic<int> runs{0};
  PeriodicTask task;
  task.Start({milliseconds(5)}, [&] { ++runs; });
  EXPECT_TRUE(Eventually([&] { return runs >= 3; }));
  task.Stop();
  const int after_stop = runs;
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(runs, after_stop) << "no run after Stop returned";
  EXPECT_TRUE(task.stopping());
}

TEST(PeriodicTask, WaitsOneIntervalBeforeTheFirstRunUnlessAskedToRunFirst) {
  std::atomic<int> runs{0};
  PeriodicTask waits;
  waits.Start({std::chrono::hours(1)}, [&] { ++runs; });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(runs, 0);
  waits.Stop();
  PeriodicTask first;
  first.Start({std::chrono::hours(1), /*run_first=*/true}, [&] { ++runs; });
  EXPECT_TRUE(Eventually([&] { return runs == 1; }));
}

TEST(PeriodicTask, AWakeRunsTheTaskNowAndStopDoesNotWaitForTheInterval) {
  std::atomic<int> runs{0};
  PeriodicTask task;
  task.Start({std::chrono::hours(1)}, [&] { ++runs; });
  task.Wake();
  EXPECT_TRUE(Eventually([&] { return runs == 1; }));
  const auto before = Clock::now();
  task.Stop();
  EXPECT_LT(Clock::now() - before, std::chrono::seconds(5)) << "Stop ends an hour's wait at once";
}

TEST(PeriodicTask, AWakeDuringARunIsNotLost) {
  std::atomic<int> runs{0};
  std::atomic<bool> release{false};
  PeriodicTask task;
  task.Start({std::chrono::hours(1), /*run_first=*/true}, [&] {
    if (++runs == 1) {
      while (!release) std::this_thread::sleep_for(milliseconds(1));
    }
  });
  EXPECT_TRUE(Eventually([&] { return runs == 1; }));
  task.Wake();  // While the first run is still going.
  release = true;
  EXPECT_TRUE(Eventually([&] { return runs == 2; }));
}

TEST(PeriodicTask, StopWithoutStartAndTwiceIsFine) {
  PeriodicTask never_started;
  never_started.Stop();
  never_started.Stop();
  EXPECT_TRUE(never_started.stopping());
  std::atomic<int> runs{0};
  never_started.Start({milliseconds(1), /*run_first=*/true}, [&] { ++runs; });
  std::this_thread::sleep_for(milliseconds(20));
  EXPECT_EQ(runs, 0) << "a stopped task stays stopped";
}

}  // namespace
}  // namespace posbias::host
