// The worker pool on a real (SQLite) store, seen through a wrapper that can make the store
// unavailable for some calls, give it a lease (so heartbeats run) and refuse renewals (a newer
// attempt took the job). The runner is a stand-in that reports progress a few times and returns a
// fixed result: what is tested is the pool's handling of claims, heartbeats, outages and fencing.
#include "server/jobs/worker_pool.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "server/jobs/job_store.h"
#include "server/status/error.h"
#include "tests/support/eventually.h"

namespace posbias::jobs {
namespace {

using namespace std::chrono_literals;

absl::Status Outage() { return absl::UnavailableError("the database is restarting"); }

// Delegates to a real store; injects failures on request.
class FaultyStore final : public JobStore {
 public:
  explicit FaultyStore(std::unique_ptr<JobStore> real) : real_(std::move(real)) {}

  std::atomic<int> fail_progress_calls{0};  // The next N UpdateProgress calls are UNAVAILABLE.
  std::atomic<int> fail_succeed_calls{0};   // The next N Succeed calls are UNAVAILABLE.
  std::atomic<int> full_disk_succeed_calls{0};  // The next N Succeed calls find the disk full.
  std::atomic<bool> refuse_renewals{false}; // RenewLease answers ABORTED.
  std::atomic<int> renewals{0};
  int64_t lease = 0;

  absl::StatusOr<Created> Create(JobRecord job, int64_t max_queued, int64_t max_queued_for_owner = 0,
                                 int64_t max_queued_for_tenant = 0) override {
    return real_->Create(job, max_queued, max_queued_for_owner, max_queued_for_tenant);
  }
  absl::StatusOr<JobRecord> Get(const std::string& id) override { return real_->Get(id); }
  absl::StatusOr<JobPage> List(const ListFilter& filter) override { return real_->List(filter); }
  absl::StatusOr<std::optional<JobRecord>> ClaimNext(const std::string& worker, const std::vector<std::string>& devices,
                                                     const std::string& device_name) override {
    return real_->ClaimNext(worker, devices, device_name);
  }
  absl::StatusOr<JobRecord> UpdateProgress(const std::string& id, int32_t attempt, const ProgressUpdate& update) override {
    if (fail_progress_calls > 0) {
      --fail_progress_calls;
      return Outage();
    }
    return real_->UpdateProgress(id, attempt, update);
  }
  absl::StatusOr<JobRecord> Transition(const std::string& id, JobState to, const TransitionOptions& options) override {
    return real_->Transition(id, to, options);
  }
  absl::StatusOr<JobRecord> Succeed(const std::string& id, int32_t attempt, const std::string& result) override {
    if (fail_succeed_calls > 0) {
      --fail_succeed_calls;
      return Outage();
    }
    if (full_disk_succeed_calls > 0) {
      --full_disk_succeed_calls;
      return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage, "disk full");
    }
    return real_->Succeed(id, attempt, result);
  }
  absl::StatusOr<std::string> GetResult(const std::string& id) override { return real_->GetResult(id); }
  absl::Status Delete(const std::string& id, bool force) override { return real_->Delete(id, force); }
  absl::StatusOr<int64_t> RecoverAfterRestart() override { return real_->RecoverAfterRestart(); }
  absl::StatusOr<int64_t> PurgeFinishedBefore(int64_t cutoff) override { return real_->PurgeFinishedBefore(cutoff); }
  absl::Status RenewLease(const std::string& id, int32_t attempt) override {
    ++renewals;
    if (refuse_renewals) return ErrorWithReason(absl::StatusCode::kAborted, ErrorReason::kInternalError, "superseded");
    return real_->RenewLease(id, attempt);
  }
  absl::StatusOr<int64_t> ReapExpiredLeases() override { return real_->ReapExpiredLeases(); }
  int64_t lease_ms() const override { return lease; }
  absl::StatusOr<std::map<JobState, int64_t>> CountByState() override { return real_->CountByState(); }
  absl::StatusOr<int64_t> Count(const ListFilter& filter) override { return real_->Count(filter); }
  absl::StatusOr<int64_t> CountQueuedAhead(const JobRecord& job, const std::optional<std::string>& tenant) override {
    return real_->CountQueuedAhead(job, tenant);
  }

 private:
  std::unique_ptr<JobStore> real_;
};

// Reports progress `steps` times, each after one step of work (by default a pause of `step`),
// then returns "done" (or stops when told to); `returned` says it has returned.
class SteppingRunner final : public JobRunner {
 public:
  SteppingRunner(int steps, std::chrono::milliseconds step) : steps_(steps), step_(step) {}
  // Each step's work is `work` instead of a pause.
  SteppingRunner(int steps, std::function<void()> work) : steps_(steps), work_(std::move(work)) {}
  absl::StatusOr<std::string> Run(const JobRecord&, const std::function<bool(const ProgressUpdate&)>& report) override {
    struct MarkReturned {
      std::atomic<bool>& returned;
      ~MarkReturned() { returned = true; }
    } mark{returned};
    for (int i = 1; i <= steps_; ++i) {
      if (work_) {
        work_();
      } else {
        std::this_thread::sleep_for(step_);
      }
      ProgressUpdate update;
      update.progress = static_cast<double>(i) / steps_;
      update.samples_done = i;
      if (!report(update)) return absl::CancelledError("told to stop");
    }
    return std::string(R"({"done":true})");
  }

  std::atomic<bool> returned{false};

 private:
  int steps_;
  std::chrono::milliseconds step_{0};
  std::function<void()> work_;
};

class WorkerPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("worker_pool_", ::testing::UnitTest::GetInstance()->current_test_info()->name(), "_", ::getpid());
    std::filesystem::remove(path_);
    auto real = OpenSqliteJobStore(path_.string());
    ASSERT_TRUE(real.ok()) << real.status();
    store_ = std::make_unique<FaultyStore>(*std::move(real));
  }
  void TearDown() override {
    store_.reset();
    for (const char* suffix : {"", "-wal", "-shm"}) std::filesystem::remove(path_.string() + suffix);
  }

  std::string Submit() {
    JobRecord job;
    job.spec.model = "gpt2-tiny";
    job.spec.length = 8;
    auto created = store_->Create(job, 0);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->job.id : "";
  }

  // Runs a pool until the job leaves RUNNING (or `timeout`); returns the job as stored.
  JobRecord RunUntilSettled(JobRunner& runner, const std::string& id, std::chrono::milliseconds timeout = 10s) {
    RunUntilAllSettled(runner, {id}, timeout);
    return *store_->Get(id);
  }

  // Runs a pool until every job in `ids` is terminal (or `timeout`). Jobs created in the same
  // millisecond are claimed in id order, which is random, so a test of several jobs waits for all.
  void RunUntilAllSettled(JobRunner& runner, const std::vector<std::string>& ids,
                          std::chrono::milliseconds timeout = 10s) {
    RunUntil(runner, [&] {
      return std::all_of(ids.begin(), ids.end(), [&](const std::string& id) { return IsTerminal(store_->Get(id)->state); });
    }, timeout);
  }

  // Runs a pool until `done` holds (or `timeout`).
  void RunUntil(JobRunner& runner, const std::function<bool()>& done, std::chrono::milliseconds timeout = 10s) {
    WorkerPool::Options options;
    options.workers = {{"cpu-0", "cpu", "cpu"}};
    options.idle_poll_ms = 20;
    options.final_write_retry_ms = 5000;
    options.backlog_retry_ms = 20;
    WorkerPool pool(store_.get(), &runner, options);
    pool.Start();
    EXPECT_TRUE(test_support::Eventually(done, timeout)) << "not within " << timeout.count() << " ms";
    pool.Stop();
  }

  std::filesystem::path path_;
  std::unique_ptr<FaultyStore> store_;
};

TEST_F(WorkerPoolTest, AJobRunsToSuccessAndItsResultIsStored) {
  SteppingRunner runner(3, 5ms);
  const std::string id = Submit();
  const JobRecord job = RunUntilSettled(runner, id);
  EXPECT_EQ(job.state, JobState::kSucceeded);
  EXPECT_EQ(job.attempt, 1);
  EXPECT_EQ(*store_->GetResult(id), R"({"done":true})");
}

// Throws for the job named `poison` (as a LibTorch error, malformed JSON or an allocation failure
// would), succeeds for every other job.
class ThrowingRunner final : public JobRunner {
 public:
  explicit ThrowingRunner(std::string poison) : poison_(std::move(poison)) {}
  absl::StatusOr<std::string> Run(const JobRecord& job, const std::function<bool(const ProgressUpdate&)>&) override {
    if (job.id == poison_) throw std::out_of_range("vector::_M_range_check: __n (which is 0) >= this->size()");
    return std::string(R"({"done":true})");
  }

 private:
  std::string poison_;
};

TEST_F(WorkerPoolTest, ARunnerThatThrowsFailsItsJobAndTheWorkerGoesOnWithTheNext) {
  const std::string poison = Submit();
  const std::string next = Submit();
  ThrowingRunner runner(poison);
  RunUntilAllSettled(runner, {poison, next});
  const JobRecord failed = *store_->Get(poison);
  EXPECT_EQ(failed.state, JobState::kFailed);
  EXPECT_EQ(failed.error_reason, "INTERNAL_ERROR");
  EXPECT_NE(failed.error_message.find("vector::_M_range_check"), std::string::npos) << failed.error_message;
  EXPECT_EQ(store_->Get(next)->state, JobState::kSucceeded);
}

TEST_F(WorkerPoolTest, AStoreOutageDuringProgressReportsDoesNotStopTheJob) {
  SteppingRunner runner(5, 5ms);
  store_->fail_progress_calls = 3;
  const std::string id = Submit();
  const JobRecord job = RunUntilSettled(runner, id);
  EXPECT_EQ(job.state, JobState::kSucceeded);
  EXPECT_EQ(job.attempt, 1) << "the same attempt finished";
  EXPECT_EQ(store_->fail_progress_calls.load(), 0);
}

TEST_F(WorkerPoolTest, AFinishedResultIsWrittenOnceTheStoreIsBack) {
  SteppingRunner runner(2, 5ms);
  store_->fail_succeed_calls = 3;  // About 50 + 100 + 200 ms of retries.
  const std::string id = Submit();
  const JobRecord job = RunUntilSettled(runner, id);
  EXPECT_EQ(job.state, JobState::kSucceeded);
  EXPECT_EQ(*store_->GetResult(id), R"({"done":true})");
}

// Found by reading the code: a final write refused for another reason than an outage was dropped,
// and a job of the single-process store stayed RUNNING, its result lost, until a restart.
TEST_F(WorkerPoolTest, AResultTheStoreRefusesIsKeptAndWrittenWhenTheDiskHasRoomAgain) {
  SteppingRunner runner(1, 1ms);
  store_->full_disk_succeed_calls = 5;
  const std::string first = Submit();
  const std::string second = Submit();
  WorkerPool::Options options;
  options.workers = {{"cpu-0", "cpu", "cpu"}};
  options.idle_poll_ms = 20;
  options.backlog_retry_ms = 20;
  WorkerPool pool(store_.get(), &runner, options);
  pool.Start();
  EXPECT_TRUE(test_support::Eventually(
      [&] { return IsTerminal(store_->Get(first)->state) && IsTerminal(store_->Get(second)->state); }));
  pool.Stop();
  EXPECT_EQ(store_->Get(first)->state, JobState::kSucceeded);
  EXPECT_EQ(store_->Get(second)->state, JobState::kSucceeded) << "the worker went on meanwhile";
  EXPECT_EQ(*store_->GetResult(first), R"({"done":true})");
  EXPECT_EQ(store_->full_disk_succeed_calls.load(), 0);
  EXPECT_EQ(pool.backlog_size(), 0);
}

// Found by reading the code: the proto sums the time limit over attempts, the worker counted the
// current attempt only, so a job re-queued again and again could run without end.
TEST_F(WorkerPoolTest, TheTimeLimitCountsTheRunTimeOfEarlierAttempts) {
  JobRecord record;
  record.spec.model = "gpt2-tiny";
  record.spec.length = 8;
  record.time_limit_seconds = 5;
  const std::string id = store_->Create(record, 0)->job.id;
  // An earlier attempt ran 10 s before it was drained.
  auto claimed = store_->ClaimNext("cpu-0", {"cpu"}, "cpu");
  ASSERT_TRUE(claimed.ok() && claimed->has_value());
  ProgressUpdate earlier;
  earlier.run_ms = 10'000;
  ASSERT_TRUE(store_->UpdateProgress(id, (*claimed)->attempt, earlier).ok());
  JobStore::TransitionOptions drained;
  drained.attempt = (*claimed)->attempt;
  ASSERT_TRUE(store_->Transition(id, JobState::kQueued, drained).ok());
  EXPECT_EQ(store_->Get(id)->run_ms, 10'000);

  SteppingRunner runner(3, 1ms);  // Well within 5 s on its own.
  const JobRecord job = RunUntilSettled(runner, id);
  EXPECT_EQ(job.state, JobState::kFailed);
  EXPECT_EQ(job.error_reason, "JOB_TIME_LIMIT_EXCEEDED");
  EXPECT_GE(job.run_ms, 10'000);
}

TEST_F(WorkerPoolTest, HeartbeatsRenewTheLeaseWhileAJobRuns) {
  store_->lease = 150;  // A renewal every 50 ms.
  // The job's one step of work lasts until the lease was renewed four times (or 10 s).
  SteppingRunner runner(1, [&] { (void)test_support::Eventually([&] { return store_->renewals >= 4; }); });
  const std::string id = Submit();
  const JobRecord job = RunUntilSettled(runner, id);
  EXPECT_EQ(job.state, JobState::kSucceeded);
  EXPECT_GE(store_->renewals.load(), 4) << "renewals while the job ran";
}

TEST_F(WorkerPoolTest, AWorkerWhoseLeaseWasTakenStopsAndWritesNothing) {
  store_->lease = 60;
  store_->refuse_renewals = true;  // A newer attempt owns the job.
  SteppingRunner runner(20, 50ms);
  const std::string id = Submit();
  RunUntil(runner, [&] { return runner.returned.load(); });
  const JobRecord job = *store_->Get(id);
  EXPECT_EQ(job.state, JobState::kRunning) << "no result, no end state from the stale attempt";
  EXPECT_FALSE(store_->GetResult(id).ok());
  EXPECT_LT(job.samples_done, 20) << "the runner was stopped early";
}

}  // namespace
}  // namespace posbias::jobs
