// The JobStore contract, written against the interface: a backend is a way to open a store at a
// location (and to reopen it there); the suite runs against every backend in the instantiation at
// the bottom. The SQLite backend opens a file in a temp directory; the PostgreSQL backend a schema
// of its own in the test run's PostgreSQL server (tests/postgres/postgres_fixture.sh).
#include "server/jobs/job_store.h"

#include <gtest/gtest.h>
#include <sqlite3.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <ostream>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/jobs/job.h"
#include "server/status/error.h"
#include "tests/jobs/postgres_test_db.h"

namespace posbias::jobs {
namespace {

#define POSBIAS_CONCAT_INNER(a, b) a##b
#define POSBIAS_CONCAT(a, b) POSBIAS_CONCAT_INNER(a, b)
#define ASSERT_OK(expr)                                             \
  do {                                                              \
    const absl::Status posbias_status_ = (expr);                    \
    ASSERT_TRUE(posbias_status_.ok()) << posbias_status_;           \
  } while (false)
#define ASSERT_OK_AND_ASSIGN(lhs, expr) \
  ASSERT_OK_AND_ASSIGN_IMPL(POSBIAS_CONCAT(posbias_statusor_, __LINE__), lhs, expr)
#define ASSERT_OK_AND_ASSIGN_IMPL(name, lhs, expr) \
  auto name = (expr);                              \
  ASSERT_TRUE(name.ok()) << name.status();         \
  lhs = *std::move(name)

bool Contains(const absl::Status& status, const std::string& text) {
  return std::string(status.message()).find(text) != std::string::npos;
}

constexpr JobState kAllStates[] = {JobState::kQueued,    JobState::kRunning, JobState::kCancelling,
                                   JobState::kSucceeded, JobState::kFailed,  JobState::kCancelled};

// Builders for the option structs (GCC warns on designated initializers that leave members out).
ListFilter Filter(std::vector<JobState> states, std::string model = "",
                  std::map<std::string, std::string> labels = {}) {
  ListFilter filter;
  filter.states = std::move(states);
  filter.model = std::move(model);
  filter.labels = std::move(labels);
  return filter;
}
ListFilter Page(int32_t page_size, std::string page_token = "") {
  ListFilter filter;
  filter.page_size = page_size;
  filter.page_token = std::move(page_token);
  return filter;
}
ProgressUpdate Progress(double progress, std::string checkpoint = "") {
  ProgressUpdate update;
  update.progress = progress;
  update.checkpoint = std::move(checkpoint);
  return update;
}
JobStore::TransitionOptions Fenced(int32_t attempt) {
  JobStore::TransitionOptions options;
  options.attempt = attempt;
  return options;
}
JobStore::TransitionOptions Failure(std::optional<int32_t> attempt, std::string reason, std::string message,
                                    int32_t code) {
  JobStore::TransitionOptions options;
  options.attempt = attempt;
  options.error_reason = std::move(reason);
  options.error_message = std::move(message);
  options.error_code = code;
  return options;
}

// ---------------------------------------------------------------------------------------------
// Backends and the fixture.

struct Backend {
  std::string name;
  // Opens (or reopens) the store kept at `location`, a fresh temp directory per test.
  std::function<absl::StatusOr<std::unique_ptr<JobStore>>(const std::filesystem::path& location, Clock clock)> open;
  // Prepares a fresh, empty location before the first open; removes what the test left after it.
  std::function<void(const std::filesystem::path& location)> create = [](const std::filesystem::path&) {};
  std::function<void(const std::filesystem::path& location)> destroy = [](const std::filesystem::path&) {};
};

// Names the backend in failure messages instead of a byte dump.
void PrintTo(const Backend& backend, std::ostream* out) { *out << backend.name; }

Backend SqliteBackend() {
  return {"Sqlite", [](const std::filesystem::path& location, Clock clock) {
            return OpenSqliteJobStore((location / "jobs.db").string(), std::move(clock));
          }};
}

// A schema per location (named after it) in the test run's PostgreSQL server.
Backend PostgresBackend() {
  Backend backend;
  backend.name = "Postgres";
  backend.create = [](const std::filesystem::path& location) {
    ASSERT_FALSE(testing::TestPostgresUri().empty()) << testing::NoPostgresMessage();
    testing::FreshSchema(testing::TestPostgresUri(), testing::SchemaName(location.filename().string()));
  };
  backend.open = [](const std::filesystem::path& location, Clock clock) {
    PostgresStoreOptions options;
    options.uri = testing::UriWithSchema(testing::TestPostgresUri(), testing::SchemaName(location.filename().string()));
    options.clock = std::move(clock);
    return OpenPostgresJobStore(std::move(options));
  };
  backend.destroy = [](const std::filesystem::path& location) {
    testing::DropSchema(testing::TestPostgresUri(), testing::SchemaName(location.filename().string()));
  };
  return backend;
}

class JobStoreContract : public ::testing::TestWithParam<Backend> {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    std::string name = absl::StrCat("job_store_", info->name(), "_", ::getpid());
    std::replace(name.begin(), name.end(), '/', '_');
    location_ = std::filesystem::path(::testing::TempDir()) / name;
    std::filesystem::remove_all(location_);
    std::filesystem::create_directories(location_);
    GetParam().create(location_);
    if (HasFatalFailure()) return;
    Reopen();
  }
  void TearDown() override {
    store_.reset();
    GetParam().destroy(location_);
    std::filesystem::remove_all(location_);
  }

  // Destroys the store (closing it) and opens the same location again.
  void Reopen() {
    store_.reset();
    auto opened = GetParam().open(location_, [now = now_] { return now->load(); });
    ASSERT_TRUE(opened.ok()) << opened.status();
    store_ = *std::move(opened);
  }

  JobStore& store() { return *store_; }
  void SetNow(int64_t ms) { now_->store(ms); }
  void Advance(int64_t ms) { now_->fetch_add(ms); }
  int64_t Now() const { return now_->load(); }

  static JobRecord MakeJob(const std::string& model = "gpt2-tiny", int32_t priority = 0,
                           const std::string& device = "") {
    JobRecord job;
    job.spec.model = model;
    job.spec.length = 64;
    job.worker_kind = device;
    job.priority = priority;
    return job;
  }

  // Creates `job` (no queue limit) and returns it as stored.
  JobRecord Add(JobRecord job) {
    auto created = store().Create(std::move(job), 0);
    EXPECT_TRUE(created.ok()) << created.status();
    return created.ok() ? created->job : JobRecord{};
  }

  // Claims the next job for `device` (tests give each job they drive a device of its own),
  // failing the test when none, or one of another device, comes back.
  JobRecord ClaimOnly(const std::string& device) {
    auto claimed = store().ClaimNext("worker-1", {device}, device + ":0");
    EXPECT_TRUE(claimed.ok()) << claimed.status();
    EXPECT_TRUE(claimed.ok() && claimed->has_value());
    if (!claimed.ok() || !claimed->has_value()) return JobRecord{};
    EXPECT_EQ((*claimed)->worker_kind, device);
    return **claimed;
  }

  // A job on its own device `device`, driven to `state` along allowed transitions.
  JobRecord JobIn(JobState state, const std::string& device) {
    JobRecord job = Add(MakeJob("gpt2-tiny", 0, device));
    if (state == JobState::kQueued) return job;
    if (state == JobState::kCancelled) return Must(store().Transition(job.id, JobState::kCancelled, {}));
    job = ClaimOnly(device);
    switch (state) {
      case JobState::kCancelling:
        return Must(store().Transition(job.id, JobState::kCancelling, {}));
      case JobState::kSucceeded:
        return Must(store().Succeed(job.id, job.attempt, R"({"ok":true})"));
      case JobState::kFailed:
        return Must(store().Transition(job.id, JobState::kFailed, {}));
      default:
        return job;
    }
  }

  static JobRecord Must(absl::StatusOr<JobRecord> job) {
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? *job : JobRecord{};
  }

 private:
  std::filesystem::path location_;
  std::shared_ptr<std::atomic<int64_t>> now_ = std::make_shared<std::atomic<int64_t>>(1'700'000'000'000);
  std::unique_ptr<JobStore> store_;
};

// ---------------------------------------------------------------------------------------------
// Create and Get.

TEST_P(JobStoreContract, CreateAssignsAnIdAndGetReturnsEveryField) {
  JobRecord job = MakeJob("qwen2-small", 7, "cpu");
  job.spec.tokens = {{1, 2, 3}, {4, 5}};
  job.spec.input = JacobianInput::kGivenTokens;
  job.spec.seed = 18'000'000'000'000'000'000u;
  job.spec.embedding_std = 0.5;
  job.spec.keep_samples = true;
  job.labels = {{"team", "theory"}, {"sweep", "a=1"}};
  job.time_limit_seconds = 90.5;
  job.request_id = "req-1";
  ASSERT_OK_AND_ASSIGN(JobStore::Created created, store().Create(job, 10));
  EXPECT_TRUE(created.created);
  const std::string& id = created.job.id;
  ASSERT_EQ(id.size(), 26u);  // "j-" + 24 hex digits (96 bits).
  EXPECT_EQ(id.substr(0, 2), "j-");
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef", 2), std::string::npos) << id;

  ASSERT_OK_AND_ASSIGN(JobRecord got, store().Get(id));
  EXPECT_EQ(got.id, id);
  EXPECT_EQ(got.request_id, "req-1");
  EXPECT_EQ(got.state, JobState::kQueued);
  EXPECT_EQ(got.priority, 7);
  EXPECT_EQ(got.labels, job.labels);
  EXPECT_EQ(got.time_limit_seconds, 90.5);
  EXPECT_EQ(got.created_ms, Now());
  EXPECT_EQ(got.updated_ms, Now());
  EXPECT_EQ(got.attempt, 0);
  EXPECT_EQ(got.eta_seconds, -1);
  EXPECT_EQ(SpecToJson(got.spec), SpecToJson(job.spec));
  EXPECT_EQ(got.spec.tokens, job.spec.tokens);
  EXPECT_EQ(got.spec.seed, job.spec.seed);

  const absl::Status missing = store().Get("j-000000000000").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorReasonOf(missing), "JOB_NOT_FOUND");
}

TEST_P(JobStoreContract, TwoJobsGetDistinctIdsAndAGivenCreationTimeIsKept) {
  JobRecord first = Add(MakeJob());
  JobRecord old = MakeJob();
  old.created_ms = 1234;
  JobRecord second = Add(old);
  EXPECT_NE(first.id, second.id);
  EXPECT_EQ(second.created_ms, 1234);
  EXPECT_EQ(Must(store().Get(second.id)).created_ms, 1234);
}

TEST_P(JobStoreContract, IdsAreTwentyFourHexDigitsOfTheOsRandomAndDoNotRepeat) {
  std::set<std::string> ids;
  std::array<int, 16> digit_counts{};
  for (int i = 0; i < 64; ++i) {
    const std::string id = Add(MakeJob()).id;
    ASSERT_EQ(id.size(), 2u + 24u) << id;  // "j-" + 96 bits.
    ASSERT_EQ(id.substr(0, 2), "j-");
    for (const char c : id.substr(2)) {
      ASSERT_TRUE((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')) << id;
      ++digit_counts[c <= '9' ? c - '0' : c - 'a' + 10];
    }
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 64u);
  // 1,536 digits: every hex digit appears (a stuck nibble would leave one out).
  for (int count : digit_counts) EXPECT_GT(count, 0);
}

TEST_P(JobStoreContract, AnOwnersQueuedQuotaIsCountedInTheInsertAndConcurrentSubmissionsCannotPassIt) {
  JobRecord mine = MakeJob();
  mine.owner = "alice";
  ASSERT_OK(store().Create(mine, 0, 2).status());
  JobRecord other = MakeJob();
  other.owner = "bob";
  ASSERT_OK(store().Create(other, 0, 2).status());  // Another owner's jobs do not count.
  // Eight submissions of alice's at once with one slot left: exactly one gets it.
  std::atomic<int> accepted{0}, refused{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&] {
      const auto created = store().Create(mine, 0, 2);
      if (created.ok()) {
        ++accepted;
      } else if (ErrorReasonOf(created.status()) == "QUOTA_EXCEEDED") {
        ++refused;
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(accepted.load(), 1);
  EXPECT_EQ(refused.load(), 7);
  const auto full = store().Create(mine, 0, 2).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(full.message().find("principal alice has 2 queued jobs"), std::string::npos) << full;
}

TEST_P(JobStoreContract, ATenantAloneFillsTheWholeQueueAndItsShareBindsOnceAnotherTenantQueues) {
  JobRecord mine = MakeJob();
  mine.tenant = "lab-a";
  std::vector<std::string> ids;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(JobStore::Created created, store().Create(mine, 4, 0, 2));
    ids.push_back(created.job.id);  // Alone: every place, not half of them.
  }
  const auto full = store().Create(mine, 4, 0, 2).status();
  EXPECT_EQ(ErrorReasonOf(full), "QUEUE_FULL");
  EXPECT_NE(full.message().find("the job queue is full"), std::string::npos) << full;
  for (size_t i = 0; i < 2; ++i) ASSERT_OK(store().Transition(ids[i], JobState::kCancelled, {}).status());
  JobRecord theirs = MakeJob();
  theirs.tenant = "lab-b";
  ASSERT_OK(store().Create(theirs, 4, 0, 2).status());
  const auto share = store().Create(mine, 4, 0, 2).status();  // lab-a holds 2, its share, and lab-b waits.
  EXPECT_EQ(ErrorReasonOf(share), "QUEUE_FULL");
  EXPECT_NE(share.message().find("tenant lab-a has 2 queued jobs, its share of the job queue (2"), std::string::npos)
      << share;
  ASSERT_OK(store().Create(theirs, 4, 0, 2).status());  // lab-b still has its half.
}

TEST_P(JobStoreContract, CreateWithAKnownRequestIdReturnsTheSameJobWithoutASecond) {
  JobRecord job = MakeJob();
  job.request_id = "client-42";
  ASSERT_OK_AND_ASSIGN(JobStore::Created first, store().Create(job, 10));
  Advance(1000);
  job.priority = 50;  // A retry with other fields still names the first job.
  ASSERT_OK_AND_ASSIGN(JobStore::Created again, store().Create(job, 10));
  EXPECT_TRUE(first.created);
  EXPECT_FALSE(again.created);
  EXPECT_EQ(again.job.id, first.job.id);
  EXPECT_EQ(again.job.priority, 0);
  ASSERT_OK_AND_ASSIGN(JobPage page, store().List({}));
  EXPECT_EQ(page.jobs.size(), 1u);

  // Jobs without a request id never collide with each other.
  Add(MakeJob());
  Add(MakeJob());
  ASSERT_OK_AND_ASSIGN(page, store().List({}));
  EXPECT_EQ(page.jobs.size(), 3u);
}

TEST_P(JobStoreContract, CreateRefusesWithQueueFullWhenMaxQueuedJobsWait) {
  JobRecord keyed = MakeJob();
  keyed.request_id = "k";
  ASSERT_OK(store().Create(keyed, 2).status());
  ASSERT_OK(store().Create(MakeJob(), 2).status());
  const absl::Status full = store().Create(MakeJob(), 2).status();
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(full), "QUEUE_FULL");

  // A retry of an accepted job is still answered, and a claim frees a place.
  ASSERT_OK_AND_ASSIGN(JobStore::Created retry, store().Create(keyed, 2));
  EXPECT_FALSE(retry.created);
  ASSERT_OK_AND_ASSIGN(auto claimed, store().ClaimNext("w", {}, "cpu:0"));
  ASSERT_TRUE(claimed.has_value());
  ASSERT_OK(store().Create(MakeJob(), 2).status());
}

// ---------------------------------------------------------------------------------------------
// List.

TEST_P(JobStoreContract, ListFiltersByStateModelAndLabels) {
  JobRecord a = MakeJob("gpt2", 0, "dev-a");
  a.labels = {{"team", "x"}, {"run", "1"}};
  JobRecord b = MakeJob("gpt2");
  b.labels = {{"team", "y"}};
  JobRecord c = MakeJob("qwen2");
  c.labels = {{"team", "x"}};
  const std::string id_a = Add(a).id;
  Advance(1);
  const std::string id_b = Add(b).id;
  Advance(1);
  const std::string id_c = Add(c).id;
  ClaimOnly("dev-a");

  auto ids = [&](const ListFilter& filter) {
    auto page = store().List(filter);
    EXPECT_TRUE(page.ok()) << page.status();
    std::vector<std::string> out;
    if (page.ok()) {
      for (const JobRecord& job : page->jobs) out.push_back(job.id);
    }
    return out;
  };
  EXPECT_EQ(ids({}), (std::vector<std::string>{id_c, id_b, id_a}));
  EXPECT_EQ(ids(Filter({JobState::kRunning})), (std::vector<std::string>{id_a}));
  EXPECT_EQ(ids(Filter({JobState::kQueued, JobState::kRunning})),
            (std::vector<std::string>{id_c, id_b, id_a}));
  EXPECT_EQ(ids(Filter({JobState::kFailed})), (std::vector<std::string>{}));
  EXPECT_EQ(ids(Filter({}, "gpt2")), (std::vector<std::string>{id_b, id_a}));
  EXPECT_EQ(ids(Filter({}, "", {{"team", "x"}})), (std::vector<std::string>{id_c, id_a}));
  EXPECT_EQ(ids(Filter({}, "", {{"team", "x"}, {"run", "1"}})), (std::vector<std::string>{id_a}));
  EXPECT_EQ(ids(Filter({}, "", {{"team", "z"}})), (std::vector<std::string>{}));
  EXPECT_EQ(ids(Filter({JobState::kQueued}, "gpt2", {{"team", "y"}})),
            (std::vector<std::string>{id_b}));
}

TEST_P(JobStoreContract, ListPagesNewestFirstWithoutDuplicatesOrGaps) {
  std::vector<std::string> created;
  for (int i = 0; i < 8; ++i) {
    created.push_back(Add(MakeJob()).id);
    if (i % 2 == 1) Advance(10);  // Pairs share a creation time: the id breaks the tie.
  }
  std::vector<std::string> seen;
  ListFilter filter;
  filter.page_size = 3;
  int pages = 0;
  do {
    ASSERT_OK_AND_ASSIGN(JobPage page, store().List(filter));
    ++pages;
    EXPECT_LE(page.jobs.size(), 3u);
    for (const JobRecord& job : page.jobs) seen.push_back(job.id);
    filter.page_token = page.next_page_token;
  } while (!filter.page_token.empty() && pages < 10);
  EXPECT_EQ(pages, 3);
  ASSERT_EQ(seen.size(), created.size());
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()).size(), created.size());
  EXPECT_EQ(std::set<std::string>(seen.begin(), seen.end()),
            std::set<std::string>(created.begin(), created.end()));
  // Newest first: (created_ms, id) strictly decreasing.
  std::vector<std::pair<int64_t, std::string>> keys;
  for (const std::string& id : seen) keys.emplace_back(Must(store().Get(id)).created_ms, id);
  EXPECT_TRUE(std::is_sorted(keys.rbegin(), keys.rend()));
}

TEST_P(JobStoreContract, ListClampsThePageSizeAndRejectsAForeignToken) {
  for (int i = 0; i < 3; ++i) Add(MakeJob());
  ASSERT_OK_AND_ASSIGN(JobPage page, store().List(Page(0)));
  EXPECT_EQ(page.jobs.size(), 3u);
  EXPECT_TRUE(page.next_page_token.empty());
  ASSERT_OK_AND_ASSIGN(page, store().List(Page(-4)));
  EXPECT_EQ(page.jobs.size(), 1u);
  EXPECT_FALSE(page.next_page_token.empty());
  ASSERT_OK_AND_ASSIGN(page, store().List(Page(100000)));
  EXPECT_EQ(page.jobs.size(), 3u);

  const absl::Status bad = store().List(Page(0, "not a token!")).status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReasonOf(bad), "INVALID_ARGUMENT");
}

// ---------------------------------------------------------------------------------------------
// ClaimNext.

TEST_P(JobStoreContract, ClaimNextTakesTheHighestPriorityThenFirstInFirstOut) {
  const std::string low = Add(MakeJob("m", -5)).id;
  Advance(1);
  const std::string first_normal = Add(MakeJob("m", 0)).id;
  Advance(1);
  const std::string second_normal = Add(MakeJob("m", 0)).id;
  Advance(1);
  const std::string urgent = Add(MakeJob("m", 100)).id;
  Advance(1);

  std::vector<std::string> order;
  for (int i = 0; i < 4; ++i) {
    ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> claimed, store().ClaimNext("worker-7", {"cpu"}, "cpu:0"));
    ASSERT_TRUE(claimed.has_value());
    EXPECT_EQ(claimed->state, JobState::kRunning);
    EXPECT_EQ(claimed->attempt, 1);
    EXPECT_EQ(claimed->worker, "worker-7");
    EXPECT_EQ(claimed->device, "cpu:0");
    EXPECT_EQ(claimed->started_ms, Now());
    EXPECT_EQ(claimed->updated_ms, Now());
    order.push_back(claimed->id);
  }
  EXPECT_EQ(order, (std::vector<std::string>{urgent, first_normal, second_normal, low}));
  ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> none, store().ClaimNext("worker-7", {"cpu"}, "cpu:0"));
  EXPECT_FALSE(none.has_value());
}

TEST_P(JobStoreContract, ClaimNextOnlyTakesJobsForTheOfferedDevices) {
  const std::string cuda = Add(MakeJob("m", 50, "cuda")).id;
  const std::string cpu = Add(MakeJob("m", 10, "cpu")).id;
  const std::string any = Add(MakeJob("m", 0, "")).id;

  ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> claimed, store().ClaimNext("w", {"cpu"}, "cpu:0"));
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->id, cpu);
  ASSERT_OK_AND_ASSIGN(claimed, store().ClaimNext("w", {}, "cpu:0"));
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->id, any);
  ASSERT_OK_AND_ASSIGN(claimed, store().ClaimNext("w", {"cpu"}, "cpu:0"));
  EXPECT_FALSE(claimed.has_value());
  ASSERT_OK_AND_ASSIGN(claimed, store().ClaimNext("w", {"cpu", "cuda"}, "cuda:1"));
  ASSERT_TRUE(claimed.has_value());
  EXPECT_EQ(claimed->id, cuda);
  EXPECT_EQ(claimed->device, "cuda:1");
}

TEST_P(JobStoreContract, AReclaimedJobGetsTheNextAttemptAndKeepsItsFirstStart) {
  const std::string id = Add(MakeJob()).id;
  ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> first, store().ClaimNext("w1", {}, "cpu:0"));
  ASSERT_TRUE(first.has_value());
  const int64_t started = first->started_ms;
  Advance(500);
  ASSERT_OK_AND_ASSIGN(JobRecord requeued, store().Transition(id, JobState::kQueued, Fenced(1)));
  EXPECT_EQ(requeued.worker, "");
  EXPECT_EQ(requeued.attempt, 1);
  Advance(500);
  ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> second, store().ClaimNext("w2", {}, "cpu:1"));
  ASSERT_TRUE(second.has_value());
  EXPECT_EQ(second->id, id);
  EXPECT_EQ(second->attempt, 2);
  EXPECT_EQ(second->worker, "w2");
  EXPECT_EQ(second->started_ms, started);
}

// ---------------------------------------------------------------------------------------------
// Progress and fencing.

TEST_P(JobStoreContract, UpdateProgressIsFencedByTheAttempt) {
  const std::string id = Add(MakeJob()).id;
  JobRecord claimed = ClaimOnly("");
  ASSERT_EQ(claimed.id, id);
  Advance(100);
  ProgressUpdate progress = Progress(0.25, R"({"chunks":1})");
  progress.samples_done = 4;
  progress.chunks_done = 1;
  progress.chunks_total = 4;
  progress.eta_seconds = 30;
  ASSERT_OK_AND_ASSIGN(JobRecord updated, store().UpdateProgress(id, 1, progress));
  EXPECT_EQ(updated.progress, 0.25);
  EXPECT_EQ(updated.samples_done, 4);
  EXPECT_EQ(updated.chunks_done, 1);
  EXPECT_EQ(updated.chunks_total, 4);
  EXPECT_EQ(updated.eta_seconds, 30);
  EXPECT_EQ(updated.checkpoint, R"({"chunks":1})");
  EXPECT_EQ(updated.updated_ms, Now());
  // An empty checkpoint keeps the stored one.
  ASSERT_OK_AND_ASSIGN(updated, store().UpdateProgress(id, 1, Progress(0.3)));
  EXPECT_EQ(updated.checkpoint, R"({"chunks":1})");

  // A newer attempt owns the job: the old worker is fenced off.
  ASSERT_OK(store().Transition(id, JobState::kQueued, {}).status());
  ClaimOnly("");
  const absl::Status stale = store().UpdateProgress(id, 1, Progress(0.9)).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(Contains(stale, "attempt 1 is no longer current")) << stale;
  EXPECT_EQ(Must(store().Get(id)).progress, 0.3);

  // The current worker sees a cancel in the returned job.
  ASSERT_OK(store().Transition(id, JobState::kCancelling, {}).status());
  ASSERT_OK_AND_ASSIGN(updated, store().UpdateProgress(id, 2, Progress(0.5)));
  EXPECT_EQ(updated.state, JobState::kCancelling);

  // A finished job takes no progress, and an unknown one is not found.
  ASSERT_OK(store().Transition(id, JobState::kCancelled, {}).status());
  EXPECT_EQ(store().UpdateProgress(id, 2, {}).status().code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ErrorReasonOf(store().UpdateProgress("j-ffffffffffff", 1, {}).status()), "JOB_NOT_FOUND");
}

// ---------------------------------------------------------------------------------------------
// Transitions.

TEST_P(JobStoreContract, TransitionAllowsExactlyTheDocumentedPairs) {
  const std::set<std::pair<JobState, JobState>> allowed = {
      {JobState::kQueued, JobState::kRunning},         {JobState::kQueued, JobState::kCancelled},
      {JobState::kRunning, JobState::kSucceeded},      {JobState::kRunning, JobState::kFailed},
      {JobState::kRunning, JobState::kCancelling},     {JobState::kRunning, JobState::kQueued},
      {JobState::kCancelling, JobState::kCancelled},   {JobState::kCancelling, JobState::kSucceeded},
      {JobState::kCancelling, JobState::kFailed},      {JobState::kCancelling, JobState::kQueued},
  };
  int n = 0;
  for (JobState from : kAllStates) {
    for (JobState to : kAllStates) {
      SCOPED_TRACE(JobStateName(from) + " -> " + JobStateName(to));
      const bool expected = allowed.count({from, to}) > 0;
      EXPECT_EQ(IsAllowedTransition(from, to), expected);
      const JobRecord job = JobIn(from, absl::StrCat("dev-", n++));
      ASSERT_EQ(job.state, from);
      Advance(1);
      absl::StatusOr<JobRecord> moved = store().Transition(job.id, to, {});
      if (expected) {
        ASSERT_TRUE(moved.ok()) << moved.status();
        EXPECT_EQ(moved->state, to);
        EXPECT_EQ(moved->updated_ms, Now());
        EXPECT_EQ(Must(store().Get(job.id)).state, to);
      } else {
        EXPECT_EQ(moved.status().code(), absl::StatusCode::kFailedPrecondition);
        EXPECT_EQ(ErrorReasonOf(moved.status()), "JOB_NOT_FINISHED");
        EXPECT_TRUE(Contains(moved.status(), absl::StrCat("job ", job.id, " is ", JobStateName(from),
                                                          ": cannot become ", JobStateName(to))))
            << moved.status();
        EXPECT_EQ(Must(store().Get(job.id)).state, from);
      }
    }
  }
}

TEST_P(JobStoreContract, TransitionRecordsFinishTimeErrorsAndClearsTheWorkerOnRequeue) {
  JobRecord running = JobIn(JobState::kRunning, "dev-a");
  EXPECT_EQ(running.worker, "worker-1");
  Advance(250);
  ASSERT_OK_AND_ASSIGN(JobRecord failed,
                       store().Transition(running.id, JobState::kFailed,
                                          Failure(1, "INTERNAL_ERROR", "out of memory", 13)));
  EXPECT_EQ(failed.finished_ms, Now());
  EXPECT_EQ(failed.error_reason, "INTERNAL_ERROR");
  EXPECT_EQ(failed.error_message, "out of memory");
  EXPECT_EQ(failed.error_code, 13);

  JobRecord other = JobIn(JobState::kRunning, "dev-b");
  ASSERT_OK_AND_ASSIGN(JobRecord requeued, store().Transition(other.id, JobState::kQueued, {}));
  EXPECT_EQ(requeued.worker, "");
  EXPECT_EQ(requeued.finished_ms, 0);
  ASSERT_OK_AND_ASSIGN(JobRecord cancelled, store().Transition(other.id, JobState::kCancelled,
                                                               Failure(std::nullopt, "IGNORED", "", 0)));
  EXPECT_EQ(cancelled.finished_ms, Now());
  EXPECT_EQ(cancelled.error_reason, "");

  EXPECT_EQ(ErrorReasonOf(store().Transition("j-aaaaaaaaaaaa", JobState::kRunning, {}).status()),
            "JOB_NOT_FOUND");
}

TEST_P(JobStoreContract, TransitionWithAStaleAttemptIsAborted) {
  JobRecord job = JobIn(JobState::kRunning, "dev-a");
  const absl::Status stale = store().Transition(job.id, JobState::kFailed, Fenced(0)).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_TRUE(Contains(stale, absl::StrCat("job ", job.id, " attempt 0 is no longer current"))) << stale;
  EXPECT_EQ(Must(store().Get(job.id)).state, JobState::kRunning);
}

// ---------------------------------------------------------------------------------------------
// Results and deletion.

TEST_P(JobStoreContract, SucceedStoresTheResultThatGetResultReturns) {
  JobRecord job = JobIn(JobState::kRunning, "dev-a");
  const std::string result = R"({"profile":[1.0,0.5,0.25]})";
  const absl::Status stale = store().Succeed(job.id, 5, result).status();
  EXPECT_EQ(stale.code(), absl::StatusCode::kAborted);
  EXPECT_EQ(ErrorReasonOf(store().GetResult(job.id).status()), "JOB_NOT_FINISHED");

  Advance(40);
  ASSERT_OK_AND_ASSIGN(JobRecord done, store().Succeed(job.id, 1, result));
  EXPECT_EQ(done.state, JobState::kSucceeded);
  EXPECT_EQ(done.finished_ms, Now());
  ASSERT_OK_AND_ASSIGN(std::string stored, store().GetResult(job.id));
  EXPECT_EQ(stored, result);

  // Succeeding twice is a refused transition.
  const absl::Status twice = store().Succeed(job.id, 1, "{}").status();
  EXPECT_EQ(twice.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorReasonOf(twice), "JOB_NOT_FINISHED");
  ASSERT_OK_AND_ASSIGN(stored, store().GetResult(job.id));
  EXPECT_EQ(stored, result);
}

TEST_P(JobStoreContract, GetResultOfAnUnfinishedOrUnknownJobFails) {
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kCancelling, JobState::kFailed,
                         JobState::kCancelled}) {
    const JobRecord job = JobIn(state, "dev-" + JobStateName(state));
    const absl::Status status = store().GetResult(job.id).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition) << JobStateName(state);
    EXPECT_EQ(ErrorReasonOf(status), "JOB_NOT_FINISHED") << JobStateName(state);
  }
  const absl::Status unknown = store().GetResult("j-123456789abc").status();
  EXPECT_EQ(unknown.code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorReasonOf(unknown), "JOB_NOT_FOUND");
}

TEST_P(JobStoreContract, DeleteRefusesAnActiveJobUnlessForced) {
  const JobRecord queued = JobIn(JobState::kQueued, "dev-q");
  const JobRecord running = JobIn(JobState::kRunning, "dev-r");
  const JobRecord done = JobIn(JobState::kSucceeded, "dev-s");
  for (const JobRecord& job : {queued, running}) {
    const absl::Status refused = store().Delete(job.id, false);
    EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_EQ(ErrorReasonOf(refused), "JOB_NOT_FINISHED");
    ASSERT_OK(store().Get(job.id).status());
  }
  ASSERT_OK(store().Delete(running.id, true));
  ASSERT_OK(store().Delete(done.id, false));
  EXPECT_EQ(ErrorReasonOf(store().Get(running.id).status()), "JOB_NOT_FOUND");
  EXPECT_EQ(ErrorReasonOf(store().GetResult(done.id).status()), "JOB_NOT_FOUND");
  EXPECT_EQ(ErrorReasonOf(store().Delete(done.id, true)), "JOB_NOT_FOUND");
  ASSERT_OK(store().Get(queued.id).status());
}

// ---------------------------------------------------------------------------------------------
// Recovery, durability, housekeeping.

// A store used by one process recovers every running job at start-up; a shared store those whose
// lease expired (their worker is gone).
TEST_P(JobStoreContract, RecoverAfterRestartRequeuesRunningJobsAndCancelsCancellingOnes) {
  JobRecord running = JobIn(JobState::kRunning, "dev-r");
  ASSERT_OK(store().UpdateProgress(running.id, 1, Progress(0.5, R"({"done":2})")).status());
  JobRecord cancelling = JobIn(JobState::kCancelling, "dev-c");
  // A cancelling job re-queued at shutdown keeps its cancel.
  JobRecord drained = JobIn(JobState::kCancelling, "dev-d");
  ASSERT_OK(store().Transition(drained.id, JobState::kQueued, {}).status());
  JobRecord queued = JobIn(JobState::kQueued, "dev-q");
  JobRecord done = JobIn(JobState::kSucceeded, "dev-s");

  Reopen();
  Advance(1000 + store().lease_ms());
  ASSERT_OK_AND_ASSIGN(int64_t requeued, store().RecoverAfterRestart());
  EXPECT_EQ(requeued, 1);

  ASSERT_OK_AND_ASSIGN(JobRecord recovered, store().Get(running.id));
  EXPECT_EQ(recovered.state, JobState::kQueued);
  EXPECT_EQ(recovered.attempt, 1);
  EXPECT_EQ(recovered.checkpoint, R"({"done":2})");
  EXPECT_EQ(recovered.progress, 0.5);
  EXPECT_EQ(recovered.worker, "");
  EXPECT_EQ(recovered.updated_ms, Now());
  for (const std::string& id : {cancelling.id, drained.id}) {
    ASSERT_OK_AND_ASSIGN(JobRecord cancelled, store().Get(id));
    EXPECT_EQ(cancelled.state, JobState::kCancelled);
    EXPECT_EQ(cancelled.finished_ms, Now());
  }
  EXPECT_EQ(Must(store().Get(queued.id)).state, JobState::kQueued);
  EXPECT_EQ(Must(store().Get(done.id)).state, JobState::kSucceeded);

  // The recovered job resumes with the next attempt.
  ASSERT_OK_AND_ASSIGN(std::optional<JobRecord> resumed, store().ClaimNext("w", {"dev-r"}, "cpu:0"));
  ASSERT_TRUE(resumed.has_value());
  EXPECT_EQ(resumed->id, running.id);
  EXPECT_EQ(resumed->attempt, 2);
  EXPECT_EQ(resumed->checkpoint, R"({"done":2})");
  Advance(1000 + store().lease_ms());
  ASSERT_OK_AND_ASSIGN(requeued, store().RecoverAfterRestart());
  EXPECT_EQ(requeued, 1);
}

// A poison job (one that takes its worker down) is run kDefaultMaxLostAttempts times at most;
// re-queues at a drain are not losses.
TEST_P(JobStoreContract, AJobWhoseAttemptsAreLostThreeTimesFailsWithAttemptsExhausted) {
  const JobRecord poison = Add(MakeJob("gpt2", 0, "dev-p"));
  ClaimOnly("dev-p");
  ASSERT_OK(store().Transition(poison.id, JobState::kQueued, {}).status());  // A drain: not a loss.
  for (int lost = 1; lost <= kDefaultMaxLostAttempts; ++lost) {
    ClaimOnly("dev-p");
    Advance(1000 + store().lease_ms());  // The worker dies with the job.
    ASSERT_OK_AND_ASSIGN(int64_t requeued, store().RecoverAfterRestart());
    ASSERT_OK_AND_ASSIGN(JobRecord job, store().Get(poison.id));
    if (lost < kDefaultMaxLostAttempts) {
      EXPECT_EQ(requeued, 1) << lost;
      EXPECT_EQ(job.state, JobState::kQueued) << lost;
    } else {
      EXPECT_EQ(requeued, 0);
      EXPECT_EQ(job.state, JobState::kFailed);
      EXPECT_EQ(job.error_reason, "ATTEMPTS_EXHAUSTED");
      EXPECT_EQ(job.error_code, static_cast<int32_t>(absl::StatusCode::kAborted));
      EXPECT_EQ(job.finished_ms, Now());
    }
  }
}

TEST_P(JobStoreContract, EverythingIsStillThereAfterClosingAndReopeningTheStore) {
  JobRecord keyed = MakeJob("gpt2", 3, "dev-k");
  keyed.request_id = "durable";
  keyed.labels = {{"k", "v"}};
  const JobRecord queued = Add(keyed);
  const JobRecord running = JobIn(JobState::kRunning, "dev-r");
  ASSERT_OK(store().UpdateProgress(running.id, 1, Progress(0.75, "{\"c\":3}")).status());
  const JobRecord done = JobIn(JobState::kSucceeded, "dev-s");
  const JobRecord failed = JobIn(JobState::kFailed, "dev-f");
  ASSERT_OK_AND_ASSIGN(JobPage before, store().List({}));

  Reopen();
  ASSERT_OK_AND_ASSIGN(JobPage after, store().List({}));
  ASSERT_EQ(after.jobs.size(), before.jobs.size());
  for (size_t i = 0; i < before.jobs.size(); ++i) {
    const JobRecord& a = before.jobs[i];
    const JobRecord& b = after.jobs[i];
    EXPECT_EQ(a.id, b.id);
    EXPECT_EQ(a.state, b.state);
    EXPECT_EQ(a.attempt, b.attempt);
    EXPECT_EQ(a.progress, b.progress);
    EXPECT_EQ(a.checkpoint, b.checkpoint);
    EXPECT_EQ(a.labels, b.labels);
    EXPECT_EQ(a.worker, b.worker);
    EXPECT_EQ(a.updated_ms, b.updated_ms);
    EXPECT_EQ(SpecToJson(a.spec), SpecToJson(b.spec));
  }
  ASSERT_OK_AND_ASSIGN(std::string result, store().GetResult(done.id));
  EXPECT_EQ(result, R"({"ok":true})");
  EXPECT_EQ(Must(store().Get(running.id)).checkpoint, "{\"c\":3}");
  EXPECT_EQ(Must(store().Get(failed.id)).state, JobState::kFailed);
  ASSERT_OK_AND_ASSIGN(JobStore::Created retry, store().Create(keyed, 0));
  EXPECT_FALSE(retry.created);
  EXPECT_EQ(retry.job.id, queued.id);
}

TEST_P(JobStoreContract, PurgeFinishedBeforeDeletesOnlyOldFinishedJobs) {
  SetNow(10'000);
  const JobRecord old_done = JobIn(JobState::kSucceeded, "dev-1");
  const JobRecord old_cancelled = JobIn(JobState::kCancelled, "dev-2");
  const JobRecord old_running = JobIn(JobState::kRunning, "dev-3");
  const JobRecord old_queued = JobIn(JobState::kQueued, "dev-4");
  SetNow(20'000);
  const JobRecord new_failed = JobIn(JobState::kFailed, "dev-5");

  ASSERT_OK_AND_ASSIGN(int64_t purged, store().PurgeFinishedBefore(15'000));
  EXPECT_EQ(purged, 2);
  EXPECT_EQ(ErrorReasonOf(store().Get(old_done.id).status()), "JOB_NOT_FOUND");
  EXPECT_EQ(ErrorReasonOf(store().GetResult(old_done.id).status()), "JOB_NOT_FOUND");
  EXPECT_EQ(ErrorReasonOf(store().Get(old_cancelled.id).status()), "JOB_NOT_FOUND");
  ASSERT_OK(store().Get(old_running.id).status());
  ASSERT_OK(store().Get(old_queued.id).status());
  ASSERT_OK(store().Get(new_failed.id).status());
  ASSERT_OK_AND_ASSIGN(purged, store().PurgeFinishedBefore(20'000));
  EXPECT_EQ(purged, 0);
  ASSERT_OK_AND_ASSIGN(purged, store().PurgeFinishedBefore(20'001));
  EXPECT_EQ(purged, 1);
}

TEST_P(JobStoreContract, CountByStateCountsEveryState) {
  JobIn(JobState::kQueued, "d1");
  JobIn(JobState::kQueued, "d2");
  JobIn(JobState::kRunning, "d3");
  JobIn(JobState::kCancelling, "d4");
  JobIn(JobState::kSucceeded, "d5");
  JobIn(JobState::kFailed, "d6");
  JobIn(JobState::kCancelled, "d7");
  JobIn(JobState::kCancelled, "d8");
  ASSERT_OK_AND_ASSIGN(auto counts, store().CountByState());
  const std::map<JobState, int64_t> expected = {
      {JobState::kQueued, 2},    {JobState::kRunning, 1}, {JobState::kCancelling, 1},
      {JobState::kSucceeded, 1}, {JobState::kFailed, 1},  {JobState::kCancelled, 2}};
  for (JobState state : kAllStates) EXPECT_EQ(counts[state], expected.at(state)) << JobStateName(state);
}

TEST_P(JobStoreContract, CountActiveForModelCountsQueuedRunningAndCancellingJobs) {
  Add(MakeJob("gpt2", 0, "a"));
  Add(MakeJob("gpt2", 0, "b"));
  Add(MakeJob("gpt2", 0, "c"));
  Add(MakeJob("gpt2", 0, "d"));
  Add(MakeJob("qwen2", 0, "e"));
  ClaimOnly("b");
  JobRecord cancelling = ClaimOnly("c");
  ASSERT_OK(store().Transition(cancelling.id, JobState::kCancelling, {}).status());
  JobRecord done = ClaimOnly("d");
  ASSERT_OK(store().Succeed(done.id, 1, "{}").status());
  const auto active = [](std::string model, std::optional<std::string> tenant = std::nullopt) {
    ListFilter filter = Filter({JobState::kQueued, JobState::kRunning, JobState::kCancelling}, std::move(model));
    filter.tenant = std::move(tenant);
    return filter;
  };
  ASSERT_OK_AND_ASSIGN(int64_t count, store().Count(active("gpt2")));
  EXPECT_EQ(count, 3);
  ASSERT_OK_AND_ASSIGN(count, store().Count(active("qwen2")));
  EXPECT_EQ(count, 1);
  ASSERT_OK_AND_ASSIGN(count, store().Count(active("none")));
  EXPECT_EQ(count, 0);
  // Per tenant: a tenant counts only its own jobs on a model.
  JobRecord other = MakeJob("qwen2", 0, "f");
  other.tenant = "lab-b";
  Add(other);
  ASSERT_OK_AND_ASSIGN(count, store().Count(active("qwen2")));
  EXPECT_EQ(count, 2);
  ASSERT_OK_AND_ASSIGN(count, store().Count(active("qwen2", "lab-b")));
  EXPECT_EQ(count, 1);
  ASSERT_OK_AND_ASSIGN(count, store().Count(active("gpt2", "lab-b")));
  EXPECT_EQ(count, 0);
}

TEST_P(JobStoreContract, CountIsTheNumberOfJobsListReturnsOverAllItsPages) {
  for (int i = 0; i < 7; ++i) {
    JobRecord job = MakeJob(i % 2 ? "gpt2" : "qwen2", 0, absl::StrCat("d", i));
    job.owner = i < 4 ? "alice" : "bob";
    job.tenant = i < 4 ? "lab-a" : "lab-b";
    job.labels = {{"sweep", i % 3 ? "x" : "y"}};
    Add(job);
  }
  ClaimOnly("d1");
  ClaimOnly("d4");
  ListFilter by_owner = Filter({JobState::kQueued});
  by_owner.owner = "alice";
  ListFilter by_tenant = Filter({}, "gpt2");
  by_tenant.tenant = "lab-b";
  for (ListFilter filter : {Filter({}), Filter({JobState::kRunning}), by_owner, by_tenant,
                            Filter({JobState::kQueued}, "", {{"sweep", "x"}})}) {
    int64_t listed = 0;
    filter.page_size = 2;  // Pages of two: Count ignores the page fields.
    ASSERT_OK(ForEachJob(store(), filter, [&](JobRecord&) { ++listed; }));
    ASSERT_OK_AND_ASSIGN(int64_t counted, store().Count(filter));
    EXPECT_EQ(counted, listed);
  }
  ASSERT_OK_AND_ASSIGN(int64_t alice_queued, store().Count(by_owner));
  EXPECT_EQ(alice_queued, 3);
}

TEST_P(JobStoreContract, TheJobsQueuedAheadOfAJobAreThoseTheClaimOrderTakesBeforeIt) {
  // Within a tenant, priority first, then the older, then the smaller id: the order ClaimNext
  // takes them in (the tenants take turns, so the count is per tenant).
  std::vector<JobRecord> jobs;
  const int32_t priorities[] = {0, 5, 0, 5, 1, 0};
  for (int i = 0; i < 6; ++i) {
    JobRecord job = MakeJob("gpt2", priorities[i], "cpu");
    job.created_ms = 1000 + (i % 3);  // Equal times for some: the id breaks the tie.
    job.tenant = i % 2 ? "lab-a" : "lab-b";
    jobs.push_back(Add(job));
  }
  std::vector<std::string> claim_order;
  std::map<std::string, int64_t> ahead_in_tenant;
  for (const JobRecord& job : jobs) {
    ASSERT_OK_AND_ASSIGN(ahead_in_tenant[job.id], store().CountQueuedAhead(job, job.tenant));
  }
  for (size_t i = 0; i < jobs.size(); ++i) claim_order.push_back(ClaimOnly("cpu").id);
  std::map<std::string, int64_t> seen_in_tenant;
  for (size_t position = 0; position < claim_order.size(); ++position) {
    const std::string& id = claim_order[position];
    const auto job = std::find_if(jobs.begin(), jobs.end(), [&](const JobRecord& j) { return j.id == id; });
    EXPECT_EQ(ahead_in_tenant[id], seen_in_tenant[job->tenant]++) << id << " of " << job->tenant;
  }
  // A claimed job is no longer ahead of anyone.
  ASSERT_OK_AND_ASSIGN(int64_t none, store().CountQueuedAhead(jobs.back(), std::nullopt));
  EXPECT_EQ(none, 0);
}

// Found by a two-tenant review: one tenant's high-priority jobs went before every job of the
// others. The tenants take turns; priority orders the jobs within one tenant's turn.
TEST_P(JobStoreContract, ClaimsTakeTheTenantsInTurnAndPriorityOrdersJobsWithinATenant) {
  auto of = [](const std::string& tenant, int32_t priority) {
    JobRecord job = MakeJob("gpt2", priority, "cpu");
    job.tenant = tenant;
    return job;
  };
  const JobRecord a1 = Add(of("lab-a", 100));
  Advance(1);
  const JobRecord a2 = Add(of("lab-a", 100));
  Advance(1);
  const JobRecord a3 = Add(of("lab-a", 50));
  Advance(1);
  const JobRecord b_low = Add(of("lab-b", 0));
  Advance(1);
  const JobRecord b_high = Add(of("lab-b", 10));
  Advance(1);
  // One worker: each job finishes before the next claim. Nobody has started: priority decides.
  std::vector<std::string> order;
  for (int i = 0; i < 5; ++i) {
    const JobRecord claimed = ClaimOnly("cpu");
    order.push_back(claimed.id);
    Advance(1);
    ASSERT_OK(store().Succeed(claimed.id, claimed.attempt, "{}").status());
    Advance(1);
  }
  EXPECT_EQ(order, (std::vector<std::string>{a1.id, b_high.id, a2.id, b_low.id, a3.id}));
  // Two workers: a tenant running a job waits while another tenant with none has one queued.
  const JobRecord a4 = Add(of("lab-a", 100));
  Advance(1);
  const JobRecord a5 = Add(of("lab-a", 100));
  Advance(1);
  const JobRecord b3 = Add(of("lab-b", -100));
  EXPECT_EQ(ClaimOnly("cpu").id, b3.id) << "lab-b's turn (its last start is the older), whatever the priorities";
  EXPECT_EQ(ClaimOnly("cpu").id, a4.id) << "lab-b runs one, lab-a none";
  EXPECT_EQ(ClaimOnly("cpu").id, a5.id);
}

TEST_P(JobStoreContract, AJobsQueuePositionCountsOnlyTheJobsAWorkerOfItsKindWouldTakeFirst) {
  JobRecord gpu = MakeJob("gpt2", 0, "cuda");
  gpu.created_ms = 1000;
  Add(gpu);
  JobRecord anywhere = MakeJob("gpt2", 0, "");
  anywhere.created_ms = 1001;
  Add(anywhere);
  JobRecord cpu = MakeJob("gpt2", 0, "cpu");
  cpu.created_ms = 1002;
  const JobRecord mine = Add(cpu);
  ASSERT_OK_AND_ASSIGN(int64_t ahead, store().CountQueuedAhead(mine, std::nullopt));
  EXPECT_EQ(ahead, 1) << "the job for any worker is ahead; the CUDA job never goes to a CPU worker";
  JobRecord later = MakeJob("gpt2", 0, "");
  later.created_ms = 1003;
  const JobRecord any_kind = Add(later);
  ASSERT_OK_AND_ASSIGN(ahead, store().CountQueuedAhead(any_kind, std::nullopt));
  EXPECT_EQ(ahead, 3) << "a job for any worker waits behind every kind's";
}

TEST_P(JobStoreContract, AModelsJobsAreThoseThatRecordedItsUidOrOlderOnesWhoseNameAndNamespaceFit) {
  const auto job = [](std::string model, std::string uid, std::string tenant, std::string device) {
    JobRecord record = MakeJob(std::move(model), 0, std::move(device));
    record.spec.model_uid = std::move(uid);
    record.tenant = std::move(tenant);
    return record;
  };
  // lab-a's model "m" (uid u-1), registered again after an earlier "m" of uid u-0 was deleted.
  const JobRecord bound = Add(job("m", "u-1", "lab-a", "a"));
  const JobRecord by_admin = Add(job("lab-a/m", "u-1", "", "b"));
  Add(job("m", "u-0", "lab-a", "c"));                              // The earlier registration's.
  Add(job("m", "u-9", "lab-b", "d"));                              // lab-b's own "m".
  const JobRecord legacy = Add(job("m", "", "lab-a", "e"));        // Stored before uids.
  const JobRecord legacy_path = Add(job("lab-a/m", "", "", "f"));  // An admin's, before uids.
  Add(job("m", "", "lab-b", "g"));                                 // lab-b's, before uids.
  ModelBinding model{"m", "lab-a/m", "u-1", "lab-a"};
  ListFilter filter;
  filter.bound_to = model;
  std::set<std::string> found;
  ASSERT_OK(ForEachJob(store(), filter, [&](JobRecord& j) { found.insert(j.id); }));
  EXPECT_EQ(found, (std::set<std::string>{bound.id, by_admin.id, legacy.id, legacy_path.id}));
  ASSERT_OK_AND_ASSIGN(int64_t count, store().Count(filter));
  EXPECT_EQ(count, 4);
  // With states and a tenant, as a model's active jobs are counted for one tenant.
  ClaimOnly("a");
  filter.states = {JobState::kRunning};
  filter.tenant = "lab-a";
  ASSERT_OK_AND_ASSIGN(count, store().Count(filter));
  EXPECT_EQ(count, 1);
  // A public model (no tenant): every job that named it without another uid.
  Add(job("gpt2", "", "lab-a", "h"));
  Add(job("gpt2", "p-1", "lab-b", "i"));
  Add(job("gpt2", "p-0", "lab-b", "j"));
  ListFilter public_model;
  public_model.bound_to = ModelBinding{"gpt2", "gpt2", "p-1", ""};
  ASSERT_OK_AND_ASSIGN(count, store().Count(public_model));
  EXPECT_EQ(count, 2);
}

TEST_P(JobStoreContract, CancellingAModelsJobsEndsTheQueuedAsksTheRunningToStopAndLeavesTheRestAlone) {
  const auto job = [&](std::string model, std::string uid, std::string tenant, std::string device) {
    JobRecord record = MakeJob(std::move(model), 0, std::move(device));
    record.spec.model_uid = std::move(uid);
    record.tenant = std::move(tenant);
    return Add(std::move(record));
  };
  const JobRecord queued = job("m", "u-1", "lab-a", "a");
  const JobRecord running_id = job("m", "u-1", "lab-a", "b");
  const JobRecord running = ClaimOnly("b");
  ASSERT_EQ(running.id, running_id.id);
  const JobRecord by_admin = job("lab-a/m", "u-1", "", "c");       // Another tenant's, same model.
  const JobRecord finished = job("m", "u-1", "lab-a", "d");
  ASSERT_TRUE(store().Transition(finished.id, JobState::kCancelled, {}).ok());
  const JobRecord other_model = job("m", "u-9", "lab-b", "e");     // lab-b's own "m".
  const JobRecord earlier_registration = job("m", "u-0", "lab-a", "f");

  const std::vector<std::string> cancelled = CancelJobsBoundTo(store(), ModelBinding{"m", "lab-a/m", "u-1", "lab-a"});

  EXPECT_EQ(std::set<std::string>(cancelled.begin(), cancelled.end()),
            (std::set<std::string>{queued.id, running.id, by_admin.id}));
  const auto state_of = [&](const JobRecord& j) {
    auto got = store().Get(j.id);
    EXPECT_TRUE(got.ok()) << got.status();
    return got.ok() ? got->state : JobState::kQueued;
  };
  EXPECT_EQ(state_of(queued), JobState::kCancelled);
  EXPECT_EQ(state_of(by_admin), JobState::kCancelled);
  EXPECT_EQ(state_of(running), JobState::kCancelling) << "its worker stops it and reports the end";
  EXPECT_EQ(state_of(finished), JobState::kCancelled);
  EXPECT_EQ(state_of(other_model), JobState::kQueued);
  EXPECT_EQ(state_of(earlier_registration), JobState::kQueued);
  EXPECT_TRUE(CancelJobsBoundTo(store(), ModelBinding{"m", "lab-a/m", "u-1", "lab-a"}).empty())
      << "nothing is left to cancel, and a cancelling job is not moved again";
}

TEST_P(JobStoreContract, AComparisonJobIsAmongTheJobsOfEveryModelItMeasures) {
  JobRecord comparison = MakeJob("m", 0, "a");
  comparison.spec.model_uid = "u-1";
  comparison.spec.versus.push_back({"init", true, "", ""});
  comparison.spec.versus.push_back({"other", false, "u-2", "digest"});
  const JobRecord added = Add(comparison);
  Add(MakeJob("third", 0, "b"));
  auto jobs_of = [&](ModelBinding model) {
    ListFilter filter;
    filter.bound_to = std::move(model);
    std::set<std::string> found;
    EXPECT_TRUE(ForEachJob(store(), filter, [&](JobRecord& j) { found.insert(j.id); }).ok());
    return found;
  };
  EXPECT_EQ(jobs_of(ModelBinding{"m", "m", "u-1", ""}), (std::set<std::string>{added.id}));
  EXPECT_EQ(jobs_of(ModelBinding{"other", "other", "u-2", ""}), (std::set<std::string>{added.id}))
      << "a versus model is in use by the job too (deleting it is refused while the job is active)";
  EXPECT_EQ(jobs_of(ModelBinding{"other", "other", "u-3", ""}), (std::set<std::string>{}))
      << "another registration of the same name is not";
  EXPECT_EQ(jobs_of(ModelBinding{"third", "third", "", ""}).size(), 1u);
}

// Tenancy: a principal's max_running_jobs is kept at claim time; other owners are not held up,
// and a listing for one tenant or one owner shows only theirs.
TEST_P(JobStoreContract, AnOwnerAtItsRunningQuotaWaitsWhileOthersAreClaimed) {
  auto owned = [](const std::string& owner, const std::string& tenant) {
    JobRecord job = MakeJob("gpt2-tiny", 0, "quota");
    job.owner = owner;
    job.tenant = tenant;
    job.max_running = 1;
    return job;
  };
  const JobRecord first = Add(owned("alice", "lab-a"));
  Advance(1);  // Claims go oldest first.
  const JobRecord second = Add(owned("alice", "lab-a"));
  Advance(1);
  const JobRecord other = Add(owned("bob", "lab-b"));
  EXPECT_EQ(ClaimOnly("quota").id, first.id);
  EXPECT_EQ(ClaimOnly("quota").id, other.id) << "alice is at her quota; bob is not";
  auto none = store().ClaimNext("worker-1", {"quota"}, "quota:0");
  ASSERT_TRUE(none.ok()) << none.status();
  EXPECT_FALSE(none->has_value()) << "alice's second job waits while her first runs";
  ASSERT_TRUE(store().Succeed(first.id, 1, "{}").ok());
  EXPECT_EQ(ClaimOnly("quota").id, second.id);

  ListFilter lab_a;
  lab_a.tenant = "lab-a";
  auto listed = store().List(lab_a);
  ASSERT_TRUE(listed.ok()) << listed.status();
  ASSERT_EQ(listed->jobs.size(), 2u);
  for (const auto& job : listed->jobs) EXPECT_EQ((std::pair{job.tenant, job.owner}), (std::pair<std::string, std::string>{"lab-a", "alice"}));
  ListFilter bobs;
  bobs.owner = "bob";
  EXPECT_EQ(store().List(bobs)->jobs.size(), 1u);
}

TEST_P(JobStoreContract, ConcurrentClaimsFromFourThreadsTakeEachJobExactlyOnce) {
  constexpr int kJobs = 50;
  std::set<std::string> ids;
  for (int i = 0; i < kJobs; ++i) ids.insert(Add(MakeJob("m", i % 3)).id);
  std::mutex mutex;
  std::vector<std::string> claimed;
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      while (true) {
        auto next = store().ClaimNext(absl::StrCat("worker-", t), {}, "cpu:0");
        if (!next.ok()) {
          ++errors;
          return;
        }
        if (!next->has_value()) return;
        std::lock_guard lock(mutex);
        claimed.push_back((*next)->id);
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(claimed.size(), static_cast<size_t>(kJobs));
  EXPECT_EQ(std::set<std::string>(claimed.begin(), claimed.end()), ids);
  ASSERT_OK_AND_ASSIGN(auto counts, store().CountByState());
  EXPECT_EQ(counts[JobState::kRunning], kJobs);
  EXPECT_EQ(counts[JobState::kQueued], 0);
}

TEST_P(JobStoreContract, OpeningAnExistingStoreAgainKeepsItsSchemaAndJobs) {
  const std::string id = Add(MakeJob()).id;
  Reopen();
  Reopen();
  ASSERT_OK(store().Get(id).status());
  Add(MakeJob());
  ASSERT_OK_AND_ASSIGN(JobPage page, store().List({}));
  EXPECT_EQ(page.jobs.size(), 2u);
}

INSTANTIATE_TEST_SUITE_P(Backends, JobStoreContract, ::testing::Values(SqliteBackend(), PostgresBackend()),
                         [](const ::testing::TestParamInfo<Backend>& param) { return param.param.name; });

// ---------------------------------------------------------------------------------------------
// SQLite specifics.

class SqliteJobStore : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("sqlite_job_store_", info->name(), "_", ::getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path() const { return (dir_ / "jobs.db").string(); }

  // Runs a one-value query on the file with the plain SQLite API.
  std::string Query(const std::string& sql) const {
    sqlite3* db = nullptr;
    std::string value;
    if (sqlite3_open_v2(Path().c_str(), &db, SQLITE_OPEN_READONLY, nullptr) == SQLITE_OK) {
      sqlite3_stmt* stmt = nullptr;
      if (sqlite3_prepare_v2(db, sql.c_str(), -1, &stmt, nullptr) == SQLITE_OK && sqlite3_step(stmt) == SQLITE_ROW) {
        const unsigned char* text = sqlite3_column_text(stmt, 0);
        if (text != nullptr) value = reinterpret_cast<const char*>(text);
      }
      sqlite3_finalize(stmt);
    }
    sqlite3_close_v2(db);
    return value;
  }

  // Runs statements on the file with the plain SQLite API (no store open).
  void Execute(const std::string& sql) const {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open_v2(Path().c_str(), &db, SQLITE_OPEN_READWRITE, nullptr), SQLITE_OK);
    char* error = nullptr;
    const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
    const std::string message = error != nullptr ? error : "";
    sqlite3_free(error);
    sqlite3_close_v2(db);
    ASSERT_EQ(rc, SQLITE_OK) << message;
  }

  // Numbers the file's migrations as a release before the shared numbering that knew today's
  // 1..`newest` did: today's 2 (PostgreSQL's parts, a no-op in a file) absent, 3..`newest` as
  // 2..newest-1, and nothing after `newest`.
  void NumberMigrationsAsBeforeTheSharedNumbering(int newest) const {
    std::string sql = "DELETE FROM schema_migrations WHERE version = 2 OR version > " + std::to_string(newest) + ";";
    for (int version = 3; version <= newest; ++version) {
      sql += " UPDATE schema_migrations SET version = " + std::to_string(version - 1) +
             " WHERE version = " + std::to_string(version) + ";";
    }
    Execute(sql);
  }

 private:
  std::filesystem::path dir_;
};

TEST_F(SqliteJobStore, MigrationsRunOnceAndTwoOpenStoresShareTheFile) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> first, OpenSqliteJobStore(Path()));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> second, OpenSqliteJobStore(Path()));
  JobRecord job;
  job.spec.model = "gpt2";
  ASSERT_OK_AND_ASSIGN(JobStore::Created created, first->Create(job, 0));
  ASSERT_OK(second->Get(created.job.id).status());
  first.reset();
  second.reset();
  ASSERT_OK_AND_ASSIGN(first, OpenSqliteJobStore(Path()));
  EXPECT_EQ(Query("SELECT COUNT(*) FROM schema_migrations"), "7");  // Each of the seven migrations once.
  EXPECT_EQ(Query("SELECT MAX(version) FROM schema_migrations"), "7");  // Numbered as the shared store's.
  EXPECT_EQ(Query("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(Query("SELECT request_id IS NULL FROM jobs"), "1");
}

TEST_F(SqliteJobStore, TheJobsStoredBeforeModelUidsHadAColumnGetTheirsFromTheirSpecs) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, OpenSqliteJobStore(Path()));
  JobRecord job;
  job.spec.model = "m";
  job.spec.model_uid = "u-1";
  ASSERT_OK_AND_ASSIGN(JobStore::Created created, store->Create(job, 0));
  store.reset();
  // The file as the release before model uids left it: no model_uid column, the uid only in the
  // spec, and its migrations numbered as then (1..4, where 2..4 are today's 3..5).
  Execute("DROP INDEX jobs_tenant_state; DROP INDEX jobs_tenant_started; DROP INDEX jobs_model_uid; "
          "ALTER TABLE jobs DROP COLUMN model_uid");
  NumberMigrationsAsBeforeTheSharedNumbering(5);
  EXPECT_EQ(Query("SELECT COUNT(*) FROM pragma_table_info('jobs') WHERE name = 'model_uid'"), "0");
  EXPECT_EQ(Query("SELECT MAX(version) FROM schema_migrations"), "4");
  ASSERT_OK_AND_ASSIGN(store, OpenSqliteJobStore(Path()));
  EXPECT_EQ(Query("SELECT model_uid FROM jobs"), "u-1");
  ListFilter filter;
  filter.bound_to = ModelBinding{"m", "m", "u-1", ""};
  ASSERT_OK_AND_ASSIGN(int64_t count, store->Count(filter));
  EXPECT_EQ(count, 1);
}

TEST_F(SqliteJobStore, AFileOfTheEarlierNumberingIsRenumberedAndNothingIsAppliedTwice) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, OpenSqliteJobStore(Path()));
  JobRecord job;
  job.spec.model = "m";
  ASSERT_OK_AND_ASSIGN(JobStore::Created created, store->Create(job, 0));
  store.reset();
  // The file as the release before the shared numbering left it: versions 1..6, where 2..6 are
  // today's 3..7 (the tenant-turn indexes were its 6).
  NumberMigrationsAsBeforeTheSharedNumbering(7);
  EXPECT_EQ(Query("SELECT MAX(version) FROM schema_migrations"), "6");
  // Re-applying any of them would fail (a column or an index that exists already).
  ASSERT_OK_AND_ASSIGN(store, OpenSqliteJobStore(Path()));
  EXPECT_EQ(Query("SELECT COUNT(*) FROM schema_migrations"), "7");
  EXPECT_EQ(Query("SELECT MAX(version) FROM schema_migrations"), "7");
  ASSERT_OK(store->Get(created.job.id).status());
  store.reset();
  ASSERT_OK_AND_ASSIGN(store, OpenSqliteJobStore(Path()));  // Renumbered once: opened again as is.
  EXPECT_EQ(Query("SELECT COUNT(*) FROM schema_migrations"), "7");
}

TEST_F(SqliteJobStore, AnInMemoryStoreWorks) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<JobStore> store, OpenSqliteJobStore(":memory:"));
  JobRecord job;
  ASSERT_OK_AND_ASSIGN(JobStore::Created created, store->Create(job, 0));
  ASSERT_OK(store->Get(created.job.id).status());
}

TEST_F(SqliteJobStore, AnUnopenablePathIsAnError) {
  const absl::Status status = OpenSqliteJobStore("/nonexistent-dir/for/sure/jobs.db").status();
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(ErrorReasonOf(status), "INTERNAL_ERROR");
}

// ---------------------------------------------------------------------------------------------
// job.h helpers.

TEST(JobState, NamesRoundTripAndUnknownNamesAreInvalid) {
  for (JobState state : kAllStates) {
    ASSERT_OK_AND_ASSIGN(JobState parsed, ParseJobState(JobStateName(state)));
    EXPECT_EQ(parsed, state);
    EXPECT_EQ(IsTerminal(state), state == JobState::kSucceeded || state == JobState::kFailed ||
                                     state == JobState::kCancelled);
  }
  const absl::Status bad = ParseJobState("QUEUED").status();
  EXPECT_EQ(bad.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReasonOf(bad), "INVALID_ARGUMENT");
}

TEST(JobSpecJson, ASpecRoundTripsAndMissingMembersKeepTheirDefaults) {
  JacobianJobSpec spec;
  spec.model = "cesaro";
  spec.length = 128;
  spec.tokens = {{7, 8}};
  spec.seed = ~uint64_t{0};
  spec.method = JacobianMethod::kHutchinson;
  spec.fit_effective_depth = true;
  ASSERT_OK_AND_ASSIGN(JacobianJobSpec back, SpecFromJson(SpecToJson(spec)));
  EXPECT_EQ(SpecToJson(back), SpecToJson(spec));
  EXPECT_EQ(back.seed, spec.seed);

  ASSERT_OK_AND_ASSIGN(back, SpecFromJson(nlohmann::json{{"model", "m"}}));
  EXPECT_EQ(back.samples, 16);
  EXPECT_EQ(back.dtype, ComputeDtype::kFloat32);
  EXPECT_EQ(back.probes, 64);
}

TEST(JobSpecJson, MembersOfTheWrongTypeAreInvalidArguments) {
  const nlohmann::json cases[] = {
      nlohmann::json::array(),
      nlohmann::json{{"length", "64"}},
      nlohmann::json{{"samples", 1.5}},
      nlohmann::json{{"seed", -1}},
      nlohmann::json{{"model", 3}},
      nlohmann::json{{"keep_samples", 1}},
      nlohmann::json{{"embedding_std", "wide"}},
      nlohmann::json{{"tokens", {1, 2}}},
      nlohmann::json{{"tokens", {{1, "x"}}}},
  };
  for (const nlohmann::json& json : cases) {
    const absl::Status status = SpecFromJson(json).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << json.dump();
    EXPECT_EQ(ErrorReasonOf(status), "INVALID_ARGUMENT") << json.dump();
  }
  EXPECT_EQ(ErrorFieldOf(SpecFromJson(nlohmann::json{{"tokens", {{1, "x"}}}}).status()), "spec.tokens[0][1]");
}

}  // namespace
}  // namespace posbias::jobs
