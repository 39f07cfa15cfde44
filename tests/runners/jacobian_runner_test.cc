// The Jacobian runner against a real catalog and model cache: a comparison job holds one model at
// a time (so it runs in a cache that cannot hold two), and every wait of a run (for room in the
// cache, for another job's instance lock) ends when the worker says stop (cancel, time limit,
// shutdown).
#include "server/runners/jacobian_runner.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/models/config.h"
#include "server/registry/model_cache.h"
#include "server/registry/model_catalog.h"
#include "tests/support/eventually.h"

namespace posbias::runners {
namespace {
namespace fs = std::filesystem;
using namespace std::chrono_literals;

int64_t TinyBytes() {
  return static_cast<int64_t>(4.0 * models::EstimatedParameters(*models::PresetConfig("gpt2-tiny")));
}

class JacobianRunnerTest : public ::testing::Test {
 protected:
  void Open(int64_t cache_bytes) {
    base_ = fs::temp_directory_path() / ("posbias_runner_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_ / "root");
    fs::create_directories(base_ / "data");
    cache_ = std::make_unique<registry::ModelCache>(registry::ModelCache::Options{.budget_bytes = cache_bytes});
    auto catalog = registry::ModelCatalog::Open({(base_ / "root").string(), (base_ / "data").string()}, cache_.get());
    ASSERT_TRUE(catalog.ok()) << catalog.status();
    catalog_ = *std::move(catalog);
    for (const char* name : {"a", "b"}) {
      registry::ModelSource source;
      source.kind = registry::SourceKind::kPreset;
      source.preset = "gpt2-tiny";
      source.seed = name[0];
      ASSERT_TRUE(catalog_->Register(name, source, {}, "").ok());
    }
    runner_ = std::make_unique<JacobianRunner>(catalog_.get(), cache_.get(), JacobianRunner::Options{});
  }
  void TearDown() override {
    runner_.reset();
    catalog_.reset();
    cache_.reset();
    fs::remove_all(base_);
  }
  static jobs::JobRecord Job(const std::string& model) {
    jobs::JobRecord job;
    job.id = "j-test";
    job.spec.model = model;
    job.spec.length = 8;
    job.spec.samples = 1;
    job.spec.seed = 3;
    return job;
  }

  fs::path base_;
  std::unique_ptr<registry::ModelCache> cache_;
  std::unique_ptr<registry::ModelCatalog> catalog_;
  std::unique_ptr<JacobianRunner> runner_;
};

// Found by a two-tenant review: with a cache that holds one model, a comparison against `init`
// held its first model while waiting for room for the second, for good.
TEST_F(JacobianRunnerTest, AComparisonRunsInACacheThatHoldsOneOfItsModelsAtATime) {
  Open(TinyBytes() * 3 / 2);
  jobs::JobRecord job = Job("a");
  job.spec.versus = {{"init", true, "", ""}, {"b", false, "", ""}};
  job.spec.init_seed = 7;
  auto result = runner_->Run(job, [](const jobs::ProgressUpdate&) { return true; });
  ASSERT_TRUE(result.ok()) << result.status();
  const auto report = nlohmann::json::parse(*result);
  ASSERT_TRUE(report.contains("comparison")) << *result;
  EXPECT_EQ(report["comparison"].size(), 3u);
  EXPECT_LE(cache_->used_bytes(), TinyBytes() * 3 / 2);
}

// Another job holds `a` (its room cannot be given back); this job's build of `b` waits, and ends
// within about a second of the worker's word to stop.
TEST_F(JacobianRunnerTest, AWaitForRoomInTheCacheEndsWhenTheWorkerSaysStop) {
  Open(TinyBytes() * 3 / 2);
  auto held = cache_->Acquire(*catalog_, "a");
  ASSERT_TRUE(held.ok());
  std::atomic<int> asked{0};
  const auto start = std::chrono::steady_clock::now();
  // The worker says stop the second time it is asked, after the build has waited once.
  auto result = runner_->Run(Job("b"), [&](const jobs::ProgressUpdate&) { return ++asked < 2; });
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_LT(waited, 5s);
  EXPECT_GE(asked.load(), 1);
}

// Another job measures `a` (it holds the instance's lock); this job on `a` waits for it, and ends
// when the worker says stop, without ever taking the lock.
TEST_F(JacobianRunnerTest, AWaitForAnotherJobsModelEndsWhenTheWorkerSaysStop) {
  Open(TinyBytes() * 4);
  std::unique_lock other_job(cache_->InstanceLock("a", jobs::ComputeDtype::kFloat32));
  std::atomic<int> asked{0};
  // The worker says stop the second time it is asked, after the run has waited once for the lock.
  auto result = runner_->Run(Job("a"), [&](const jobs::ProgressUpdate&) { return ++asked < 2; });
  EXPECT_EQ(result.status().code(), absl::StatusCode::kCancelled) << result.status();
  EXPECT_TRUE(other_job.owns_lock());
}

// A comparison of `b` against `a` where another job holds `a`: the run waits for `a` after it let
// go of `b` (it never holds both), and finishes once `a` is free.
TEST_F(JacobianRunnerTest, AComparisonWaitingForItsSecondModelHoldsNoOtherRoom) {
  Open(TinyBytes() * 3 / 2);
  auto held = cache_->Acquire(*catalog_, "a");
  ASSERT_TRUE(held.ok());
  jobs::JobRecord job = Job("b");
  job.spec.versus = {{"a", false, "", ""}};
  std::atomic<int> asked{0};  // While it waits for room, the run asks the worker whether to go on.
  absl::StatusOr<std::string> result;
  std::thread run([&] {
    result = runner_->Run(job, [&](const jobs::ProgressUpdate&) {
      ++asked;
      return true;
    });
  });
  // b cannot be built while a is held (1.5 models of room): the whole run waits; let a go.
  EXPECT_TRUE(test_support::Eventually([&] { return asked > 0; })) << "the run waits for room";
  held->reset();
  run.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_LE(cache_->used_bytes(), TinyBytes() * 3 / 2);
}

}  // namespace
}  // namespace posbias::runners
