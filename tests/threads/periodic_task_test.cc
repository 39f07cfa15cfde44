// The periodic task every poller of the server runs on: it runs on time, at once when woken, and
// stops promptly however long its interval.
#include "server/threads/periodic_task.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "tests/support/eventually.h"

namespace posbias::threads {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

TEST(PeriodicTask, RunsEveryIntervalUntilStopped) {
  std::atomic<int> runs{0};
  PeriodicTask task;
  task.Start({milliseconds(5)}, [&] { ++runs; });
  EXPECT_TRUE(test_support::Eventually([&] { return runs >= 3; }));
  task.Stop();  // Joins the task's thread: nothing can run after it returns.
  const int after_stop = runs;
  task.Wake();
  EXPECT_EQ(runs, after_stop) << "no run after Stop returned, woken or not";
  EXPECT_TRUE(task.stopping());
}

TEST(PeriodicTask, WaitsOneIntervalBeforeTheFirstRunUnlessAskedToRunFirst) {
  std::atomic<int> runs{0};
  PeriodicTask waits;
  waits.Start({std::chrono::hours(1)}, [&] { ++runs; });
  EXPECT_TRUE(test_support::Eventually([&] { return waits.waits_begun() == 1; }));
  EXPECT_EQ(runs, 0) << "its first wait began with no run before it";
  waits.Stop();
  PeriodicTask first;
  first.Start({std::chrono::hours(1), /*run_first=*/true}, [&] { ++runs; });
  EXPECT_TRUE(test_support::Eventually([&] { return runs == 1; }));
}

TEST(PeriodicTask, AWakeRunsTheTaskNowAndStopDoesNotWaitForTheInterval) {
  std::atomic<int> runs{0};
  PeriodicTask task;
  task.Start({std::chrono::hours(1)}, [&] { ++runs; });
  task.Wake();
  EXPECT_TRUE(test_support::Eventually([&] { return runs == 1; }));
  const auto before = Clock::now();
  task.Stop();
  EXPECT_LT(Clock::now() - before, std::chrono::seconds(5)) << "Stop ends an hour's wait at once";
}

TEST(PeriodicTask, AWakeDuringARunIsNotLost) {
  std::atomic<int> runs{0};
  std::atomic<bool> release{false};
  PeriodicTask task;
  task.Start({std::chrono::hours(1), /*run_first=*/true}, [&] {
    if (++runs == 1) (void)test_support::Eventually([&] { return release.load(); });
  });
  EXPECT_TRUE(test_support::Eventually([&] { return runs == 1; }));
  task.Wake();  // While the first run is still going.
  release = true;
  EXPECT_TRUE(test_support::Eventually([&] { return runs == 2; }));
}

TEST(PeriodicTask, StopWithoutStartAndTwiceIsFine) {
  PeriodicTask never_started;
  never_started.Stop();
  never_started.Stop();
  EXPECT_TRUE(never_started.stopping());
  std::atomic<int> runs{0};
  never_started.Start({milliseconds(1), /*run_first=*/true}, [&] { ++runs; });
  never_started.Stop();  // Joins whatever Start began.
  EXPECT_EQ(runs, 0) << "a stopped task stays stopped";
  EXPECT_EQ(never_started.waits_begun(), 0) << "not even a wait";
}

}  // namespace
}  // namespace posbias::threads
