// What the shared PostgreSQL store adds to the JobStore contract (job_store_test.cc runs the
// contract itself against both stores): leases and the reaper, fencing of stale workers, several
// stores (replicas) on one database, NOTIFY wake-ups, concurrent migrations, connection errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/jobs/job_store.h"
#include "server/status/error.h"
#include "tests/jobs/postgres_test_db.h"

namespace posbias::jobs {
namespace {

constexpr int64_t kLeaseMs = 30'000;

class PostgresJobStore : public ::testing::Test {
 protected:
  void SetUp() override {
    base_uri_ = testing::TestPostgresUri();
    ASSERT_FALSE(base_uri_.empty()) << testing::NoPostgresMessage();
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    schema_ = testing::SchemaName(absl::StrCat("pg_", info->name(), "_", ::getpid()));
    uri_ = testing::FreshSchema(base_uri_, schema_);
  }
  void TearDown() override { testing::DropSchema(base_uri_, schema_); }

  // A store on this test's schema: one "replica" sharing the database with the others.
  std::unique_ptr<JobStore> Replica() {
    PostgresStoreOptions options;
    options.uri = uri_;
    options.lease_ms = kLeaseMs;
    options.clock = [now = now_] { return now->load(); };
    auto store = OpenPostgresJobStore(std::move(options));
    EXPECT_TRUE(store.ok()) << store.status();
    return store.ok() ? *std::move(store) : nullptr;
  }

  static JobRecord MakeJob(const std::string& request_id = "") {
    JobRecord job;
    job.spec.model = "gpt2-tiny";
    job.spec.length = 16;
    job.request_id = request_id;
    return job;
  }

  void Advance(int64_t ms) { now_->fetch_add(ms); }

  std::string base_uri_, schema_, uri_;
  std::shared_ptr<std::atomic<int64_t>> now_ = std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);
};

TEST_F(PostgresJobStore, AClaimHoldsALeaseThatHeartbeatsRenew) {
  auto store = Replica();
  ASSERT_TRUE(store->Create(MakeJob(), 0).ok());
  auto claimed = store->ClaimNext("worker-a", {"cpu"}, "cpu");
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  for (int beat = 0; beat < 5; ++beat) {
    Advance(kLeaseMs * 8 / 10);
    ASSERT_TRUE(store->RenewLease((*claimed)->id, 1).ok());
    auto reaped = store->ReapExpiredLeases();
    ASSERT_TRUE(reaped.ok()) << reaped.status();
    EXPECT_EQ(*reaped, 0) << "a renewed lease must not expire";
  }
  EXPECT_EQ(store->Get((*claimed)->id)->state, JobState::kRunning);
}

TEST_F(PostgresJobStore, AnExpiredLeaseIsReapedAndTheStaleWorkerIsFencedOut) {
  auto replica_a = Replica();
  auto replica_b = Replica();
  ASSERT_TRUE(replica_a->Create(MakeJob(), 0).ok());
  auto first = replica_a->ClaimNext("worker-a", {"cpu"}, "cpu");
  ASSERT_TRUE(first.ok() && first->has_value());
  const std::string id = (*first)->id;
  ProgressUpdate half;
  half.progress = 0.5;
  half.checkpoint = R"({"samples":[1]})";
  ASSERT_TRUE(replica_a->UpdateProgress(id, 1, half).ok());

  // Worker A stops heartbeating (killed, or cut off from the database); replica B's reaper runs.
  Advance(kLeaseMs + 1);
  auto reaped = replica_b->ReapExpiredLeases();
  ASSERT_TRUE(reaped.ok()) << reaped.status();
  EXPECT_EQ(*reaped, 1);
  auto queued = replica_b->Get(id);
  EXPECT_EQ(queued->state, JobState::kQueued);
  EXPECT_EQ(queued->checkpoint, R"({"samples":[1]})") << "the checkpoint survives for the next attempt";

  // Between the reap and the next claim, A can neither report nor finish.
  EXPECT_EQ(replica_a->UpdateProgress(id, 1, half).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(replica_a->RenewLease(id, 1).code(), absl::StatusCode::kAborted);
  EXPECT_FALSE(replica_a->Succeed(id, 1, R"({"by":"a"})").ok());

  auto second = replica_b->ClaimNext("worker-b", {"cpu"}, "cpu");
  ASSERT_TRUE(second.ok() && second->has_value());
  EXPECT_EQ((*second)->attempt, 2);
  EXPECT_EQ((*second)->worker, "worker-b");

  // A wakes up late: every write of attempt 1 is refused; B's result is the one stored.
  EXPECT_EQ(replica_a->Succeed(id, 1, R"({"by":"a"})").status().code(), absl::StatusCode::kAborted);
  JobStore::TransitionOptions stale;
  stale.attempt = 1;
  EXPECT_EQ(replica_a->Transition(id, JobState::kFailed, stale).status().code(), absl::StatusCode::kAborted);
  ASSERT_TRUE(replica_b->Succeed(id, 2, R"({"by":"b"})").ok());
  EXPECT_EQ(*replica_a->GetResult(id), R"({"by":"b"})");
  EXPECT_EQ(replica_a->Succeed(id, 1, R"({"by":"a"})").status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(*replica_a->GetResult(id), R"({"by":"b"})");
}

TEST_F(PostgresJobStore, ACancellingJobWhoseWorkerIsLostEndsCancelled) {
  auto store = Replica();
  ASSERT_TRUE(store->Create(MakeJob(), 0).ok());
  auto claimed = store->ClaimNext("worker-a", {"cpu"}, "cpu");
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ASSERT_TRUE(store->Transition((*claimed)->id, JobState::kCancelling, {}).ok());
  Advance(kLeaseMs + 1);
  ASSERT_TRUE(store->ReapExpiredLeases().ok());
  EXPECT_EQ(store->Get((*claimed)->id)->state, JobState::kCancelled);
}

TEST_F(PostgresJobStore, ReplicasClaimingConcurrentlyTakeEveryJobExactlyOnce) {
  constexpr int kReplicas = 3, kThreadsPerReplica = 3, kJobs = 60;
  std::vector<std::unique_ptr<JobStore>> replicas;
  for (int r = 0; r < kReplicas; ++r) replicas.push_back(Replica());
  for (int j = 0; j < kJobs; ++j) ASSERT_TRUE(replicas[j % kReplicas]->Create(MakeJob(), 0).ok());
  std::mutex mutex;
  std::multiset<std::string> claimed;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int r = 0; r < kReplicas; ++r) {
    for (int t = 0; t < kThreadsPerReplica; ++t) {
      threads.emplace_back([&, r, t] {
        while (true) {
          auto next = replicas[r]->ClaimNext(absl::StrCat("w", r, "-", t), {"cpu"}, "cpu");
          if (!next.ok()) {
            ++errors;
            return;
          }
          if (!next->has_value()) return;
          std::lock_guard lock(mutex);
          claimed.insert((*next)->id);
        }
      });
    }
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(claimed.size(), static_cast<size_t>(kJobs));
  for (const std::string& id : claimed) EXPECT_EQ(claimed.count(id), 1u) << id << " was claimed twice";
}

TEST_F(PostgresJobStore, TheSameRequestIdOnTwoReplicasCreatesOneJob) {
  auto replica_a = Replica();
  auto replica_b = Replica();
  std::vector<std::string> ids(8);
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      auto created = (i % 2 == 0 ? replica_a : replica_b)->Create(MakeJob("req-42"), 0);
      if (created.ok()) ids[i] = created->job.id;
    });
  }
  for (auto& thread : threads) thread.join();
  for (const std::string& id : ids) EXPECT_EQ(id, ids[0]);
  EXPECT_EQ(testing::QueryValue(uri_, "SELECT COUNT(*) FROM jobs"), "1");
}

TEST_F(PostgresJobStore, ASubmissionOnOneReplicaWakesTheListenerOfAnother) {
  auto worker_replica = Replica();
  auto api_replica = Replica();
  std::mutex mutex;
  std::condition_variable woken;
  int wakes = 0;
  worker_replica->OnWorkAvailable([&] {
    std::lock_guard lock(mutex);
    ++wakes;
    woken.notify_all();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // The listener connects.
  ASSERT_TRUE(api_replica->Create(MakeJob(), 0).ok());
  std::unique_lock lock(mutex);
  EXPECT_TRUE(woken.wait_for(lock, std::chrono::seconds(10), [&] { return wakes > 0; }))
      << "no NOTIFY arrived within 10 s";
  lock.unlock();
  worker_replica->OnWorkAvailable(nullptr);  // Stops the listener.
}

TEST_F(PostgresJobStore, ReplicasStartingTogetherMigrateTheSchemaOnce) {
  std::vector<std::thread> threads;
  std::atomic<int> opened{0};
  for (int i = 0; i < 6; ++i) {
    threads.emplace_back([&] {
      PostgresStoreOptions options;
      options.uri = uri_;
      if (OpenPostgresJobStore(options).ok()) ++opened;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(opened.load(), 6);
  EXPECT_EQ(testing::QueryValue(uri_, "SELECT COUNT(*) FROM schema_migrations"), "1");
  EXPECT_EQ(testing::QueryValue(uri_, "SELECT MAX(version) FROM schema_migrations"), "1");
}

TEST_F(PostgresJobStore, ASchemaNewerThanTheServerIsRefused) {
  ASSERT_NE(Replica(), nullptr);
  {
    pqxx::connection connection(uri_);
    pqxx::work transaction(connection);
    transaction.exec("INSERT INTO schema_migrations (version, applied_ms) VALUES (999, 0)");
    transaction.commit();
  }
  PostgresStoreOptions options;
  options.uri = uri_;
  const absl::Status status = OpenPostgresJobStore(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(status.message()).find("newer"), std::string::npos) << status;
}

TEST_F(PostgresJobStore, AnUnreachableServerIsUnavailable) {
  PostgresStoreOptions options;
  options.uri = "postgresql://posbias@127.0.0.1:1/nothing?connect_timeout=2";
  const absl::Status status = OpenPostgresJobStore(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
}

TEST(OpenJobStore, TheConnectionStringChoosesTheStore) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "open_job_store_", ::getpid());
  std::filesystem::create_directories(dir);
  EXPECT_TRUE(OpenJobStore("", dir + "/jobs.sqlite").ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/jobs.sqlite"));
  EXPECT_TRUE(OpenJobStore("sqlite:" + dir + "/other.sqlite", "").ok());
  EXPECT_TRUE(std::filesystem::exists(dir + "/other.sqlite"));
  const absl::Status foreign = OpenJobStore("mysql://root:hunter2@db/jobs", "").status();
  EXPECT_EQ(foreign.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(std::string(foreign.message()).find("hunter2"), std::string::npos) << "a password is never echoed";
  std::filesystem::remove_all(dir);
  if (!testing::TestPostgresUri().empty()) {
    EXPECT_TRUE(OpenJobStore(testing::TestPostgresUri(), "").ok());
  }
}

}  // namespace
}  // namespace posbias::jobs
