// The housekeeper on a real SQLite store with an injected clock: when it purges finished jobs, and
// that it keeps what is younger than the retention or still active. (Reaping expired leases needs a
// shared store: postgres_job_store_test.cc drives it there.)
#include "server/jobs/housekeeper.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>

#include "server/jobs/job_store.h"

namespace posbias::jobs {
namespace {

constexpr int64_t kMinute = 60'000;

class HousekeeperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto store = OpenSqliteJobStore(":memory:", [now = now_] { return now->load(); });
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = std::move(*store);
  }

  // A job that finished (cancelled while queued) now.
  std::string FinishedJob() {
    JobRecord job;
    job.spec.model = "gpt2-tiny";
    job.spec.length = 8;
    auto created = store_->Create(job, 0);
    EXPECT_TRUE(created.ok()) << created.status();
    EXPECT_TRUE(store_->Transition(created->job.id, JobState::kCancelled, {}).ok());
    return created->job.id;
  }
  std::string QueuedJob() {
    JobRecord job;
    job.spec.model = "gpt2-tiny";
    job.spec.length = 8;
    return store_->Create(job, 0)->job.id;
  }
  bool Exists(const std::string& id) { return store_->Get(id).ok(); }
  void Advance(int64_t ms) { now_->fetch_add(ms); }

  Housekeeper::Options Hourly() {
    Housekeeper::Options options;
    options.retention_hours = 1;
    options.purge_interval_ms = 120 * kMinute;
    return options;
  }

  std::shared_ptr<std::atomic<int64_t>> now_ = std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);
  std::unique_ptr<JobStore> store_;
};

TEST_F(HousekeeperTest, TheFirstRoundPurgesFinishedJobsOlderThanTheRetention) {
  const std::string old_job = FinishedJob();
  Advance(61 * kMinute);
  const std::string young_job = FinishedJob();
  Housekeeper housekeeper(store_.get(), Hourly(), [now = now_] { return now->load(); });
  EXPECT_EQ(housekeeper.Round().purged, 1);
  EXPECT_FALSE(Exists(old_job));
  EXPECT_TRUE(Exists(young_job));
}

TEST_F(HousekeeperTest, LaterRoundsPurgeOnlyOncePerPurgeInterval) {
  Housekeeper housekeeper(store_.get(), Hourly(), [now = now_] { return now->load(); });
  const std::string job = FinishedJob();
  EXPECT_EQ(housekeeper.Round().purged, 0) << "finished just now";
  Advance(90 * kMinute);  // Past the retention, but the next purge is due at 120 minutes.
  EXPECT_EQ(housekeeper.Round().purged, 0);
  EXPECT_TRUE(Exists(job));
  Advance(31 * kMinute);
  EXPECT_EQ(housekeeper.Round().purged, 1);
  EXPECT_FALSE(Exists(job));
}

TEST_F(HousekeeperTest, ActiveJobsAreNeverPurgedWhateverTheirAge) {
  const std::string queued = QueuedJob();
  Advance(1000 * kMinute);
  Housekeeper housekeeper(store_.get(), Hourly(), [now = now_] { return now->load(); });
  EXPECT_EQ(housekeeper.Round().purged, 0);
  EXPECT_TRUE(Exists(queued));
}

TEST_F(HousekeeperTest, AStoreOfOneProcessHasNoLeasesToReap) {
  int64_t reported = -1;
  auto options = Hourly();
  options.on_reaped = [&](int64_t reaped) { reported = reaped; };
  Housekeeper housekeeper(store_.get(), options, [now = now_] { return now->load(); });
  EXPECT_EQ(housekeeper.Round().reaped, 0);
  EXPECT_EQ(reported, -1) << "nothing reaped, nothing reported";
}

TEST_F(HousekeeperTest, StopWakesItsHourLongWaitAtOnce) {
  Housekeeper housekeeper(store_.get(), Hourly());
  housekeeper.Start();
  const auto start = std::chrono::steady_clock::now();
  housekeeper.Stop();
  // A Stop that waited for the next hourly round would take an hour; a minute is "at once" on any machine.
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::minutes(1));
  housekeeper.Stop();  // Idempotent: the thread is gone, nothing to wait for.
}

}  // namespace
}  // namespace posbias::jobs
