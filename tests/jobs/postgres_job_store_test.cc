// What the shared PostgreSQL store adds to the JobStore contract (job_store_test.cc runs the
// contract itself against both stores): leases and the reaper, fencing of stale workers, several
// stores (replicas) on one database, NOTIFY wake-ups, concurrent migrations, connection errors.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
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
#include "server/jobs/housekeeper.h"
#include "server/jobs/job_store.h"
#include "server/status/error.h"
#include "tests/jobs/postgres_test_db.h"
#include "tests/support/eventually.h"

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

  // A store on this test's schema: one "replica" sharing the database with the others; its
  // connections name themselves `application` to the server when one is given.
  std::unique_ptr<JobStore> Replica(int64_t part_samples = 0, const std::string& application = "") {
    PostgresStoreOptions options;
    options.uri = application.empty() ? uri_ : absl::StrCat(uri_, "&application_name=", application);
    options.lease_ms = kLeaseMs;
    options.part_samples = part_samples;
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

TEST_F(PostgresJobStore, TheHousekeeperOfAnyReplicaReapsALostWorkersJobAndReportsIt) {
  auto replica_a = Replica();
  auto replica_b = Replica();
  ASSERT_TRUE(replica_a->Create(MakeJob(), 0).ok());
  auto claimed = replica_a->ClaimNext("worker-a", {"cpu"}, "cpu");
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  int64_t reported = 0;
  Housekeeper::Options options;
  options.on_reaped = [&](int64_t reaped) { reported += reaped; };
  Housekeeper housekeeper(replica_b.get(), options, [now = now_] { return now->load(); });
  EXPECT_EQ(housekeeper.Round().reaped, 0) << "the lease still holds";
  Advance(kLeaseMs + 1);
  EXPECT_EQ(housekeeper.Round().reaped, 1);
  EXPECT_EQ(reported, 1);
  EXPECT_EQ(replica_b->Get((*claimed)->id)->state, JobState::kQueued);
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
  auto worker_replica = Replica(0, /*application=*/schema_);
  auto api_replica = Replica();
  std::mutex mutex;
  std::condition_variable woken;
  int wakes = 0;
  worker_replica->OnWorkAvailable([&] {
    std::lock_guard lock(mutex);
    ++wakes;
    woken.notify_all();
  });
  // The listener has connected once its session (named for this test) has sent its LISTEN.
  ASSERT_TRUE(test_support::Eventually([&] {
    return testing::QueryValue(uri_, absl::StrCat("SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = '",
                                                  schema_, "' AND query LIKE 'LISTEN%'")) != "0";
  })) << "the listener did not connect within 10 s";
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
  // Each migration applied once.
  EXPECT_EQ(testing::QueryValue(uri_, "SELECT COUNT(*) FROM schema_migrations"),
            testing::QueryValue(uri_, "SELECT COUNT(DISTINCT version) FROM schema_migrations"));
  EXPECT_EQ(testing::QueryValue(uri_, "SELECT MAX(version) FROM schema_migrations"), "7");  // The latest.
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

// ---------------------------------------------------------------------------------------------
// Sample parts.

class PostgresSplitJob : public PostgresJobStore {
 protected:
  // An 8-sample job on a store with parts of 3 samples: parts [0, 3), [3, 6), [6, 8).
  JobRecord CreateSplit(JobStore& store) {
    JobRecord job = MakeJob();
    job.spec.samples = 8;
    auto created = store.Create(job, 0);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->job : JobRecord{};
  }
  static JobRecord Claim(JobStore& store, const std::string& worker) {
    auto claimed = store.ClaimNext(worker, {"cpu"}, "cpu");
    EXPECT_TRUE(claimed.ok() && claimed->has_value()) << (claimed.ok() ? "nothing to claim" : claimed.status().ToString());
    return claimed.ok() && claimed->has_value() ? **claimed : JobRecord{};
  }
  static bool NothingToClaim(JobStore& store) {
    auto claimed = store.ClaimNext("idle", {"cpu"}, "cpu");
    return claimed.ok() && !claimed->has_value();
  }
};

TEST_F(PostgresSplitJob, PartsRunOnSeveralWorkersAndTheParentIsMergedOnceWithTheirResultsInOrder) {
  auto api = Replica(3);
  auto workers = Replica(3);
  const JobRecord job = CreateSplit(*api);
  EXPECT_EQ(job.parts_total, 3);
  ASSERT_EQ(api->List({})->jobs.size(), 1u) << "parts are not listed";
  EXPECT_EQ((*api->CountByState())[JobState::kQueued], 3) << "a split job counts as its parts (work units)";

  std::vector<JobRecord> parts = {Claim(*workers, "a"), Claim(*workers, "b"), Claim(*workers, "c")};
  std::sort(parts.begin(), parts.end(), [](const JobRecord& x, const JobRecord& y) { return x.unit_begin < y.unit_begin; });
  const std::vector<std::pair<int64_t, int64_t>> ranges = {{0, 3}, {3, 6}, {6, 8}};
  for (size_t k = 0; k < parts.size(); ++k) {
    EXPECT_EQ(parts[k].parent_id, job.id);
    EXPECT_EQ(parts[k].id, absl::StrCat(job.id, ".", k));
    EXPECT_EQ(std::make_pair(parts[k].unit_begin, parts[k].unit_end), ranges[k]);
    EXPECT_EQ(parts[k].spec.samples, 8) << "a part carries its parent's spec";
  }
  EXPECT_EQ(api->Get(job.id)->state, JobState::kRunning);
  EXPECT_TRUE(NothingToClaim(*workers)) << "the parent waits for its parts";

  ProgressUpdate update;
  update.samples_done = 3;
  update.progress = 1.0;
  ASSERT_TRUE(workers->UpdateProgress(parts[0].id, parts[0].attempt, update).ok());
  EXPECT_EQ(api->Get(job.id)->samples_done, 3);
  EXPECT_DOUBLE_EQ(api->Get(job.id)->progress, 3.0 / 8.0);

  ASSERT_TRUE(workers->Succeed(parts[2].id, parts[2].attempt, "r2").ok());
  ASSERT_TRUE(workers->Succeed(parts[0].id, parts[0].attempt, "r0").ok());
  EXPECT_TRUE(NothingToClaim(*workers));
  ASSERT_TRUE(workers->Succeed(parts[1].id, parts[1].attempt, "r1").ok());
  EXPECT_EQ(api->Get(job.id)->state, JobState::kQueued) << "all parts done: queued for the merge";

  const JobRecord merge = Claim(*workers, "m");
  EXPECT_EQ(merge.id, job.id);
  EXPECT_EQ(merge.attempt, 1);
  EXPECT_EQ(merge.part_results, (std::vector<std::string>{"r0", "r1", "r2"}));
  ASSERT_TRUE(workers->Succeed(merge.id, merge.attempt, "merged").ok());
  EXPECT_EQ(*api->GetResult(job.id), "merged");
  EXPECT_EQ((*api->CountByState())[JobState::kSucceeded], 3);

  ASSERT_TRUE(api->Delete(job.id, false).ok());
  EXPECT_EQ(api->Get(parts[0].id).status().code(), absl::StatusCode::kNotFound) << "parts go with their parent";
}

TEST_F(PostgresSplitJob, AComparisonIsSplitByModelAndSampleSoThatOneSampleOfThreeModelsRunsOnThreeWorkers) {
  auto api = Replica(1);
  JobRecord job = MakeJob();
  job.spec.samples = 1;
  job.spec.versus.resize(2);  // The first model, then two more: three units of work.
  auto created = api->Create(job, 0);
  ASSERT_TRUE(created.ok()) << created.status();
  EXPECT_EQ(created->job.parts_total, 3);
  std::vector<JobRecord> parts = {Claim(*api, "a"), Claim(*api, "b"), Claim(*api, "c")};
  std::sort(parts.begin(), parts.end(), [](const JobRecord& x, const JobRecord& y) { return x.unit_begin < y.unit_begin; });
  for (int64_t k = 0; k < 3; ++k) {
    EXPECT_EQ(std::make_pair(parts[k].unit_begin, parts[k].unit_end), std::make_pair(k, k + 1)) << "part " << k;
  }
  // A part's samples_done counts its units; the parent's progress is over all of the job's units.
  ProgressUpdate update;
  update.samples_done = 1;
  update.progress = 1.0;
  ASSERT_TRUE(api->UpdateProgress(parts[1].id, parts[1].attempt, update).ok());
  EXPECT_DOUBLE_EQ(api->Get(created->job.id)->progress, 1.0 / 3.0);
}

TEST_F(PostgresSplitJob, AFailedPartFailsItsParentAndStopsTheOtherParts) {
  auto store = Replica(3);
  const JobRecord job = CreateSplit(*store);
  const JobRecord first = Claim(*store, "a");
  const JobRecord second = Claim(*store, "b");
  JobStore::TransitionOptions failure;
  failure.attempt = first.attempt;
  failure.error_reason = "INSUFFICIENT_MEMORY";
  failure.error_message = "out of memory";
  failure.error_code = static_cast<int32_t>(absl::StatusCode::kResourceExhausted);
  ASSERT_TRUE(store->Transition(first.id, JobState::kFailed, failure).ok());
  const JobRecord parent = *store->Get(job.id);
  EXPECT_EQ(parent.state, JobState::kFailed);
  EXPECT_EQ(parent.error_reason, "INSUFFICIENT_MEMORY");
  EXPECT_NE(parent.error_message.find(first.id), std::string::npos) << parent.error_message;
  EXPECT_EQ(store->Get(second.id)->state, JobState::kCancelling) << "the running part stops at its next chunk";
  EXPECT_TRUE(NothingToClaim(*store)) << "the queued part was cancelled";
}

TEST_F(PostgresSplitJob, CancellingARunningSplitJobEndsWhenItsRunningPartsStop) {
  auto store = Replica(3);
  const JobRecord job = CreateSplit(*store);
  const JobRecord running = Claim(*store, "a");
  ASSERT_TRUE(store->Transition(job.id, JobState::kCancelling, {}).ok());
  EXPECT_EQ(store->Get(running.id)->state, JobState::kCancelling);
  EXPECT_TRUE(NothingToClaim(*store));
  EXPECT_EQ(store->Get(job.id)->state, JobState::kCancelling);
  JobStore::TransitionOptions fence;
  fence.attempt = running.attempt;
  ASSERT_TRUE(store->Transition(running.id, JobState::kCancelled, fence).ok());
  EXPECT_EQ(store->Get(job.id)->state, JobState::kCancelled);
}

TEST_F(PostgresSplitJob, APartWhoseWorkerIsLostIsReapedAndRunAgainWhileTheParentWaits) {
  auto store = Replica(3);
  const JobRecord job = CreateSplit(*store);
  const JobRecord lost = Claim(*store, "a");
  Advance(kLeaseMs + 1);
  ASSERT_EQ(*store->ReapExpiredLeases(), 1) << "only the part is reaped, not its waiting parent";
  EXPECT_EQ(store->Get(job.id)->state, JobState::kRunning);
  std::set<std::string> claimed;
  for (int i = 0; i < 3; ++i) claimed.insert(Claim(*store, "b").id);
  EXPECT_EQ(claimed.count(lost.id), 1u);
  EXPECT_EQ(store->Get(lost.id)->attempt, 2);
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
