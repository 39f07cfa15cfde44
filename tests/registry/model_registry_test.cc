// The model registry: paths stay under the model root, names and duplicates, persistence across
// reopening, deletion rules, the loaded-model cache.
#include "server/registry/model_cache.h"
#include "server/registry/model_catalog.h"
#include "server/registry/model_index.h"
#include "server/registry/scratch_files.h"
#include "server/registry/sha256.h"

#include <signal.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include <torch/torch.h>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/models/weights.h"
#include "server/status/error.h"
#include "tests/support/eventually.h"

namespace posbias::registry {
namespace {
namespace fs = std::filesystem;

// One replica's registry as the server composes it: the catalog, with the torch-side cache as its
// loader.
struct Registry {
  explicit Registry(int64_t cache_bytes, bool keep_models = true)
      : cache(ModelCache::Options{.budget_bytes = cache_bytes, .keep_models = keep_models}) {}
  explicit Registry(ModelCache::Options options) : cache(std::move(options)) {}
  auto Register(const std::string& name, const ModelSource& source, const std::map<std::string, std::string>& labels,
                const std::string& request_id) {
    return catalog->Register(name, source, labels, request_id);
  }
  template <typename... Args> auto Get(Args&&... args) { return catalog->Get(std::forward<Args>(args)...); }
  template <typename... Args> auto Delete(Args&&... args) { return catalog->Delete(std::forward<Args>(args)...); }
  template <typename... Args> auto Export(Args&&... args) { return catalog->Export(std::forward<Args>(args)...); }
  auto List() { return catalog->List(); }
  auto ResolveUnderRoot(const std::string& path, const std::string& tenant = "") const {
    return catalog->ResolveUnderRoot(path, tenant);
  }
  auto Acquire(const std::string& name, jobs::ComputeDtype dtype = jobs::ComputeDtype::kFloat32,
               const Cancelled& stop = nullptr) {
    return cache.Acquire(*catalog, name, dtype, stop);
  }
  int64_t loads() const { return cache.loads(); }

  ModelCache cache;
  std::unique_ptr<ModelCatalog> catalog;
};

class RegistryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = fs::temp_directory_path() / ("posbias_registry_test_" + std::to_string(::getpid()) + "_" +
                                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(base_);
    fs::create_directories(base_ / "root" / "inside");
    fs::create_directories(base_ / "outside");
    fs::create_directories(base_ / "data");
  }
  void TearDown() override { fs::remove_all(base_); }
  std::unique_ptr<Registry> Open(int64_t cache_bytes = int64_t{1} << 30) {
    auto registry = std::make_unique<Registry>(cache_bytes);
    auto catalog = ModelCatalog::Open({(base_ / "root").string(), (base_ / "data").string()}, &registry->cache);
    EXPECT_TRUE(catalog.ok()) << catalog.status();
    if (catalog.ok()) registry->catalog = std::move(*catalog);
    return registry;
  }
  static ModelSource TinyPreset(uint64_t seed = 1) {
    ModelSource source;
    source.kind = SourceKind::kPreset;
    source.preset = "gpt2-tiny";
    source.seed = seed;
    return source;
  }
  fs::path base_;
};

TEST_F(RegistryTest, RefusesPathsThatLeaveTheModelRoot) {
  auto registry = Open();
  fs::create_symlink(base_ / "outside", base_ / "root" / "escape");
  for (const std::string& path : std::vector<std::string>{"../outside", (base_ / "outside").string(), "escape",
                                                          "inside/../../outside"}) {
    EXPECT_EQ(ErrorReasonOf(registry->ResolveUnderRoot(path).status()), "PATH_NOT_ALLOWED") << path;
  }
  EXPECT_EQ(ErrorReasonOf(registry->ResolveUnderRoot("missing").status()), "PATH_NOT_FOUND");
  EXPECT_TRUE(registry->ResolveUnderRoot("inside").ok());
}

TEST_F(RegistryTest, ATenantsCheckpointPathsStayInItsOwnFolderAndRefusalsSayNothingOfOthers) {
  fs::create_directories(base_ / "root" / "lab-a" / "ckpt");
  fs::create_directories(base_ / "root" / "lab-b" / "mine");
  fs::create_symlink(base_ / "root" / "lab-a" / "ckpt", base_ / "root" / "lab-b" / "into-a");
  fs::create_symlink(base_ / "root" / "lab-a" / "nothing-here", base_ / "root" / "lab-b" / "dangling");
  auto registry = Open();
  struct Row {
    std::string path;
    std::string reason;  // "" = resolves.
  };
  const Row rows[] = {
      {"mine", ""},
      {"missing", "PATH_NOT_FOUND"},
      {"../lab-a/ckpt", "PATH_NOT_ALLOWED"},       // Another tenant's folder that exists...
      {"../lab-a/no-such", "PATH_NOT_ALLOWED"},    // ...and a path there that does not: the same answer.
      {"mine/../../lab-a/ckpt", "PATH_NOT_ALLOWED"},
      {(base_ / "root" / "lab-a" / "ckpt").string(), "PATH_NOT_ALLOWED"},  // Absolute.
      {"into-a", "PATH_NOT_ALLOWED"},              // A symlink into another tenant's folder.
      {"dangling", "PATH_NOT_ALLOWED"},            // A symlink to nothing: no probing through it.
  };
  for (const Row& row : rows) {
    const auto resolved = registry->ResolveUnderRoot(row.path, "lab-b");
    if (row.reason.empty()) {
      ASSERT_TRUE(resolved.ok()) << row.path << ": " << resolved.status();
      EXPECT_EQ(*resolved, fs::canonical(base_ / "root" / "lab-b" / row.path).string());
      continue;
    }
    EXPECT_EQ(ErrorReasonOf(resolved.status()), row.reason) << row.path;
  }
  // The two paths into lab-a differ only by the path the caller gave.
  const auto exists = registry->ResolveUnderRoot("../lab-a/ckpt", "lab-b").status();
  const auto missing = registry->ResolveUnderRoot("../lab-a/no-such", "lab-b").status();
  std::string a(exists.message()), b(missing.message());
  a.replace(a.find("../lab-a/ckpt"), std::string("../lab-a/ckpt").size(), "X");
  b.replace(b.find("../lab-a/no-such"), std::string("../lab-a/no-such").size(), "X");
  EXPECT_EQ(a, b);
  EXPECT_EQ(exists.code(), missing.code());
  // An admin's (public) scope is the whole root.
  EXPECT_TRUE(registry->ResolveUnderRoot("lab-a/ckpt").ok());
  // Found by a hostile review: an admin's "lab-b/../lab-a/ckpt" was normalized into lab-a's folder
  // (and opened with lab-b's wall) where the docs say '..' is refused. Any '..' is, even one
  // that stays inside.
  EXPECT_EQ(ErrorReasonOf(registry->ResolveUnderRoot("lab-b/../lab-a/ckpt").status()), "PATH_NOT_ALLOWED");
  EXPECT_EQ(ErrorReasonOf(registry->ResolveUnderRoot("mine/../mine", "lab-b").status()), "PATH_NOT_ALLOWED");
}

TEST_F(RegistryTest, AReRegisteredNameIsAnotherRegistrationThatReplicasAndBoundJobsTellApart) {
  auto api = Open();
  auto worker = Open();
  ASSERT_TRUE(api->Register("m", TinyPreset(3), {}, "").ok());
  auto first = worker->Get("m");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->uid.size(), 32u);
  EXPECT_EQ(first->uid.find_first_not_of("0123456789abcdef"), std::string::npos) << first->uid;
  EXPECT_GE(first->generation, 2);  // Reserved, then READY.
  ASSERT_TRUE(worker->Acquire("m").ok());
  EXPECT_TRUE(worker->catalog->GetBound(first->uid, first->weights_sha256, "m", "").ok());

  ASSERT_TRUE(api->Delete("m", /*force=*/true, 1).ok());
  EXPECT_EQ(ErrorReasonOf(worker->catalog->GetBound(first->uid, "", "m", "").status()), "MODEL_NOT_FOUND");
  ASSERT_TRUE(api->Register("m", TinyPreset(9), {}, "").ok());
  auto second = worker->Get("m");
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_NE(second->uid, first->uid);
  EXPECT_EQ(second->source.seed, 9u) << "the replica replaced its stale entry";
  const auto bound = worker->catalog->GetBound(first->uid, first->weights_sha256, "m", "");
  EXPECT_EQ(bound.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorReasonOf(bound.status()), "MODEL_CHANGED");
  const int64_t loads = worker->loads();
  ASSERT_TRUE(worker->Acquire("m").ok());
  EXPECT_EQ(worker->loads(), loads + 1) << "the old registration's cached model was not reused";
  // Uids are not reused: a third registration gets a third one.
  ASSERT_TRUE(api->Delete("m", true, 0).ok());
  ASSERT_TRUE(api->Register("m", TinyPreset(9), {}, "").ok());
  EXPECT_NE(api->Get("m")->uid, second->uid);
  EXPECT_EQ(api->Get("gpt2-tiny")->uid, "preset-gpt2-tiny");
}

TEST_F(RegistryTest, TwoTenantsMayUseOneNameAndEachSeesItsOwnModelWhileReplicasKeepBoth) {
  auto api = Open();
  auto a = api->catalog->Register("shared-m", TinyPreset(3), {}, "", "lab-a");
  auto b = api->catalog->Register("shared-m", TinyPreset(4), {}, "", "lab-b");
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_NE(a->uid, b->uid);
  EXPECT_NE(a->weights_sha256, b->weights_sha256);
  // Each tenant's bare name is its own model; the path names either, for whoever may see it.
  EXPECT_EQ(api->catalog->Find("shared-m", "lab-a")->uid, a->uid);
  EXPECT_EQ(api->catalog->Find("shared-m", "lab-b")->uid, b->uid);
  EXPECT_EQ(api->catalog->Find("lab-b/shared-m", "lab-a")->uid, b->uid);
  EXPECT_EQ(ErrorReasonOf(api->catalog->Find("shared-m", "lab-c").status()), "MODEL_NOT_FOUND");
  EXPECT_EQ(ErrorReasonOf(api->catalog->Find("shared-m", "").status()), "MODEL_NOT_FOUND") << "not public";
  EXPECT_EQ(api->catalog->Find("gpt2-tiny", "lab-a")->uid, "preset-gpt2-tiny") << "public models are every tenant's";
  // Another replica reads both from the shared index, under their paths.
  auto replica = Open();
  EXPECT_EQ(replica->Get("lab-a/shared-m")->uid, a->uid);
  EXPECT_EQ(replica->Get("lab-b/shared-m")->uid, b->uid);
  // A job bound to A's model finds A's, by uid, whatever the name means elsewhere.
  auto bound = replica->catalog->GetBound(a->uid, a->weights_sha256, "shared-m", "lab-a");
  ASSERT_TRUE(bound.ok()) << bound.status();
  EXPECT_EQ(bound->tenant, "lab-a");
  // Deleting A's leaves B's, and A's job fails rather than run on B's.
  ASSERT_TRUE(api->Delete("lab-a/shared-m", /*force=*/true, 1).ok());
  EXPECT_EQ(ErrorReasonOf(replica->catalog->GetBound(a->uid, a->weights_sha256, "shared-m", "lab-a").status()),
            "MODEL_NOT_FOUND");
  EXPECT_EQ(replica->Get("lab-b/shared-m")->uid, b->uid);
  // Models of two tenants load as two models.
  ASSERT_TRUE(replica->Acquire("lab-b/shared-m").ok());
  EXPECT_EQ(ErrorReasonOf(replica->Acquire("lab-a/shared-m").status()), "MODEL_NOT_FOUND");
}

TEST_F(RegistryTest, ATenantCannotTakeAPublicNameNorAPublicModelATenantsName) {
  auto api = Open();
  ASSERT_TRUE(api->Register("public-m", TinyPreset(1), {}, "").ok());
  ASSERT_TRUE(api->catalog->Register("tenant-m", TinyPreset(2), {}, "", "lab-a").ok());
  const auto shadow = api->catalog->Register("public-m", TinyPreset(3), {}, "", "lab-a").status();
  EXPECT_EQ(shadow.code(), absl::StatusCode::kAlreadyExists);
  EXPECT_NE(std::string(shadow.message()).find("public model named public-m"), std::string::npos) << shadow;
  const auto preset = api->catalog->Register("gpt2-tiny", TinyPreset(3), {}, "", "lab-a").status();
  EXPECT_EQ(ErrorReasonOf(preset), "MODEL_ALREADY_EXISTS");
  const auto taken = api->Register("tenant-m", TinyPreset(4), {}, "").status();
  EXPECT_EQ(ErrorReasonOf(taken), "MODEL_ALREADY_EXISTS");
  EXPECT_NE(std::string(taken.message()).find("lab-a/tenant-m"), std::string::npos) << taken;
  EXPECT_TRUE(api->catalog->Register("tenant-m", TinyPreset(5), {}, "", "lab-b").ok()) << "another tenant may";
}

TEST_F(RegistryTest, AnIndexFromBeforeUidsIsGivenThemOnceItsNamesKeepTheirNamespacesAndTenantPathsBecomeRelative) {
  nlohmann::json legacy = nlohmann::json::array();
  legacy.push_back({{"name", "old"},
                    {"source", {{"kind", "preset"}, {"preset", "gpt2-tiny"}, {"overrides", nlohmann::json::object()}, {"seed", 2}}},
                    {"state", "ready"},
                    {"created_ms", 1}});
  legacy.push_back({{"name", "ckpt"},
                    {"tenant", "lab-a"},
                    {"source", {{"kind", "checkpoint"}, {"overrides", nlohmann::json::object()}, {"path", "lab-a/run1"}}},
                    {"state", "failed"},
                    {"created_ms", 1}});
  std::ofstream(base_ / "data" / "models.json") << legacy.dump();
  std::string uid;
  {
    auto registry = Open();
    auto old = registry->Get("old");
    ASSERT_TRUE(old.ok()) << old.status();
    uid = old->uid;
    EXPECT_EQ(uid.size(), 32u);
  }
  auto reopened = Open();
  EXPECT_EQ(reopened->Get("old")->uid, uid) << "the migration's uid is persisted, not drawn again";
  // Each old name lands in the namespace its record names: public, or its tenant's.
  EXPECT_EQ(reopened->Get("old")->tenant, "");
  EXPECT_EQ(reopened->Get("lab-a/ckpt")->tenant, "lab-a");
  EXPECT_EQ(reopened->catalog->Find("ckpt", "lab-a")->tenant, "lab-a");
  EXPECT_EQ(ErrorReasonOf(reopened->catalog->Find("ckpt", "lab-b").status()), "MODEL_NOT_FOUND");
  std::ifstream in(base_ / "data" / "models.json");
  const auto items = nlohmann::json::parse(in);
  for (const auto& item : items) {
    if (item["name"] == "ckpt") {
      EXPECT_EQ(item["source"]["path"], "run1");
    }
  }
}

TEST_F(RegistryTest, ListsBuiltInPresetsAndRefusesToDeleteThem) {
  auto registry = Open();
  auto preset = registry->Get("qwen2-0.5b");
  ASSERT_TRUE(preset.ok());
  EXPECT_TRUE(preset->builtin);
  EXPECT_EQ(ErrorReasonOf(registry->Delete("gpt2", false, 0)), "MODEL_BUILTIN");
}

TEST_F(RegistryTest, RegistersOnceByNameAndRecognisesARetriedRequest) {
  auto registry = Open();
  auto first = registry->Register("tiny", TinyPreset(), {{"team", "a"}}, "req-1");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->state, ModelState::kReady);
  EXPECT_GT(first->parameters, 0);
  EXPECT_TRUE(registry->Register("tiny", TinyPreset(), {}, "req-1").ok());
  EXPECT_EQ(ErrorReasonOf(registry->Register("tiny", TinyPreset(), {}, "req-2").status()), "MODEL_ALREADY_EXISTS");
  EXPECT_EQ(registry->Register("Bad_Name", TinyPreset(), {}, "").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RegistryTest, KeepsRegistrationsAcrossReopening) {
  {
    auto registry = Open();
    ASSERT_TRUE(registry->Register("kept", TinyPreset(7), {{"k", "v"}}, "").ok());
  }
  auto reopened = Open();
  auto entry = reopened->Get("kept");
  ASSERT_TRUE(entry.ok());
  EXPECT_EQ(entry->source.seed, 7u);
  EXPECT_EQ(entry->labels.at("k"), "v");
  EXPECT_TRUE(reopened->Acquire("kept").ok());
}

// Replicas sharing one data directory (a shared volume) see each other's registrations and
// deletions through models.json, and keep their own.
TEST_F(RegistryTest, ReplicasSharingTheDataDirectorySeeEachOthersRegistrationsAndDeletions) {
  auto api = Open();
  auto worker = Open();
  ASSERT_TRUE(api->Register("shared", TinyPreset(3), {}, "").ok());
  EXPECT_EQ(ErrorReasonOf(worker->Register("shared", TinyPreset(9), {}, "").status()), "MODEL_ALREADY_EXISTS")
      << "a name another replica registered is taken";
  auto seen = worker->Get("shared");
  ASSERT_TRUE(seen.ok()) << seen.status();
  EXPECT_EQ(seen->source.seed, 3u);
  EXPECT_TRUE(worker->Acquire("shared").ok());

  ASSERT_TRUE(worker->Register("own", TinyPreset(4), {}, "").ok());
  EXPECT_TRUE(api->Get("own").ok()) << "the worker's registration reaches the API replica";
  EXPECT_TRUE(worker->Get("shared").ok()) << "writing the index keeps the other replica's entry";

  ASSERT_TRUE(api->Delete("shared", false, 0).ok());
  EXPECT_EQ(ErrorReasonOf(worker->Get("shared").status()), "MODEL_NOT_FOUND");
  EXPECT_EQ(ErrorReasonOf(worker->Acquire("shared").status()), "MODEL_NOT_FOUND");
  EXPECT_TRUE(api->Get("own").ok()) << "a deletion keeps the other replica's registration";
  for (const auto& entry : worker->List()) EXPECT_NE(entry.name, "shared");
}

// Two replicas registering different models at the same instant: each one's write of the shared
// index keeps the other's registrations (the read-merge-write of models.json is locked).
TEST_F(RegistryTest, ReplicasRegisteringAtTheSameTimeLoseNoRegistration) {
  auto first = Open(), second = Open();
  constexpr int kEach = 30;
  auto register_many = [](Registry& registry, const std::string& prefix) {
    for (int i = 0; i < kEach; ++i) {
      EXPECT_TRUE(registry.Register(prefix + std::to_string(i), TinyPreset(i + 1), {}, "").ok());
    }
  };
  std::thread a([&] { register_many(*first, "a-"); });
  std::thread b([&] { register_many(*second, "b-"); });
  a.join();
  b.join();
  auto reopened = Open();
  int registered = 0;
  for (const auto& entry : reopened->List()) registered += !entry.builtin;
  EXPECT_EQ(registered, 2 * kEach);
}

// Two replicas registering the same names at the same instant: for every name exactly one wins,
// the other is told MODEL_ALREADY_EXISTS (the name is reserved in the shared index while loading).
TEST_F(RegistryTest, ReplicasRegisteringOneNameAtTheSameTimeLetExactlyOneWin) {
  auto first = Open(), second = Open();
  constexpr int kNames = 30;
  std::vector<int> wins(kNames, 0);
  std::mutex wins_mutex;
  auto register_all = [&](Registry& registry, uint64_t seed) {
    for (int i = 0; i < kNames; ++i) {
      auto entry = registry.Register("same-" + std::to_string(i), TinyPreset(seed), {}, "");
      if (entry.ok()) {
        std::lock_guard lock(wins_mutex);
        ++wins[i];
      } else {
        EXPECT_EQ(ErrorReasonOf(entry.status()), "MODEL_ALREADY_EXISTS");
      }
    }
  };
  std::thread a([&] { register_all(*first, 1); });
  std::thread b([&] { register_all(*second, 2); });
  a.join();
  b.join();
  for (int i = 0; i < kNames; ++i) EXPECT_EQ(wins[i], 1) << "same-" << i;
}

// A replica that died while registering leaves a reservation in the index; it expires, and until
// then the name is shown as loading and refused.
TEST_F(RegistryTest, AReservationOfADeadReplicaExpires) {
  auto registry = Open();
  const auto index = base_ / "data" / "models.json";
  auto write_reservation = [&](int64_t expires_ms) {
    std::ofstream(index) << R"([{"name": "orphan", "source": {"kind": "preset", "preset": "gpt2-tiny", "overrides": {}},
                                "state": "loading", "owner": "gone:1:x", "loading_expires_ms": )"
                         << expires_ms << "}]";
  };
  const int64_t now_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
      std::chrono::system_clock::now().time_since_epoch()).count();
  write_reservation(now_ms + 600'000);
  auto other = Open();
  auto shown = other->Get("orphan");
  ASSERT_TRUE(shown.ok()) << shown.status();
  EXPECT_EQ(shown->state, ModelState::kLoading);
  EXPECT_EQ(ErrorReasonOf(other->Register("orphan", TinyPreset(), {}, "").status()), "MODEL_ALREADY_EXISTS");
  EXPECT_EQ(ErrorReasonOf(other->Acquire("orphan").status()), "MODEL_NOT_READY");
  write_reservation(now_ms - 1);
  auto late = Open();
  EXPECT_TRUE(late->Register("orphan", TinyPreset(), {}, "").ok()) << "an expired reservation is free";
}

// What a process killed mid-write leaves in the data directory is removed when the next one
// starts; the scratch files of live processes (another replica on this host, any process of
// another host that touched its file recently) are not.
TEST_F(RegistryTest, OpeningRemovesWhatDeadProcessesLeftBehindAndNothingOfLiveOnes) {
  {
    auto first = Open();
    ASSERT_TRUE(first->Register("kept", TinyPreset(), {}, "").ok());
  }
  const fs::path uploads = base_ / "data" / "uploads";
  const fs::path data = base_ / "data";
  auto touch = [](const fs::path& path) { std::ofstream(path) << "bytes"; };
  // A scratch file of this host made by the current process's path scheme, then its owner "dies":
  // a pid that runs nothing.
  const std::string mine = ScratchPath(uploads.string(), "staging", "m");
  const std::string host = fs::path(mine).filename().string().substr(std::string(".staging-m~").size());
  const std::string host_name = host.substr(0, host.find('~'));
  pid_t dead = 4'000'000;
  while (::kill(dead, 0) == 0 || errno == EPERM) --dead;
  const fs::path dead_staging = uploads / (".staging-m~" + host_name + "~" + std::to_string(dead) + "~1.0");
  const fs::path live_staging = uploads / (".staging-m~" + host_name + "~" + std::to_string(::getppid()) + "~1.0");
  const fs::path other_host_fresh = uploads / ".export-m~another-host~1~1.0";
  const fs::path other_host_aged = uploads / ".hash-m~another-host~1~1.0";
  const fs::path old_naming_aged = uploads / ".staging-m-12345";
  const fs::path index_copy = data / "models.json.tmp.999.0";
  const fs::path orphan = uploads / "ghost.safetensors";
  const fs::path orphan_config = uploads / "ghost.safetensors.config.json";
  const fs::path unrelated = uploads / "notes.txt";
  for (const auto& path : {dead_staging, live_staging, other_host_fresh, other_host_aged, old_naming_aged, index_copy,
                           orphan, orphan_config, unrelated}) {
    touch(path);
  }
  const auto day_ago = fs::file_time_type::clock::now() - std::chrono::hours(25);
  fs::last_write_time(other_host_aged, day_ago);
  fs::last_write_time(old_naming_aged, day_ago);

  auto reopened = Open();
  EXPECT_FALSE(fs::exists(dead_staging));
  EXPECT_FALSE(fs::exists(other_host_aged));
  EXPECT_FALSE(fs::exists(old_naming_aged));
  EXPECT_FALSE(fs::exists(index_copy));
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_FALSE(fs::exists(orphan_config));
  EXPECT_TRUE(fs::exists(live_staging)) << "its process still runs";
  EXPECT_TRUE(fs::exists(other_host_fresh)) << "another host's, touched recently";
  EXPECT_TRUE(fs::exists(unrelated)) << "not a file of ours";
  EXPECT_EQ(reopened->catalog->leftovers().index_temporaries, 1);
  EXPECT_EQ(reopened->catalog->leftovers().scratch.files_removed, 5);
  EXPECT_EQ(reopened->Get("kept")->state, ModelState::kReady);
}

TEST_F(RegistryTest, AModelLargerThanTheModelCacheIsRefusedUpFrontLeavingNothing) {
  auto registry = std::make_unique<Registry>(int64_t{1} << 30);
  ModelCatalog::Options options{(base_ / "root").string(), (base_ / "data").string()};
  options.max_model_bytes = 1 << 20;  // gpt2-tiny's float32 parameters need about 0.5 MiB, gpt2 about 500 MiB.
  registry->catalog = *ModelCatalog::Open(options, &registry->cache);
  EXPECT_TRUE(registry->Register("small", TinyPreset(), {}, "").ok());
  ModelSource big;
  big.kind = SourceKind::kPreset;
  big.preset = "gpt2";
  const auto refused = registry->Register("big", big, {}, "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "INSUFFICIENT_MEMORY");
  EXPECT_NE(std::string(refused.status().message()).find("--model-cache-mb"), std::string::npos);
  EXPECT_EQ(ErrorReasonOf(registry->Get("big").status()), "MODEL_NOT_FOUND");
  EXPECT_EQ(registry->loads(), 1) << "nothing was built for the refused model";
}

TEST_F(RegistryTest, RefusesToDeleteAModelInUseUnlessForced) {
  auto registry = Open();
  ASSERT_TRUE(registry->Register("busy", TinyPreset(), {}, "").ok());
  EXPECT_EQ(ErrorReasonOf(registry->Delete("busy", false, 2)), "MODEL_IN_USE");
  EXPECT_TRUE(registry->Delete("busy", true, 2).ok());
  EXPECT_EQ(ErrorReasonOf(registry->Get("busy").status()), "MODEL_NOT_FOUND");
}

TEST_F(RegistryTest, LoadsACheckpointDirectoryAndRefusesABrokenOneLeavingNothing) {
  auto registry = Open();
  fs::create_directories(base_ / "root" / "ckpt");
  auto source_model = std::move(*models::BuildModel(*models::PresetConfig("qwen2-tiny"), 5));
  ASSERT_TRUE(models::ExportWeights(*source_model, (base_ / "root" / "ckpt" / "model.safetensors").string()).ok());
  std::ofstream(base_ / "root" / "ckpt" / "config.json") << models::ConfigToHuggingFaceJson(source_model->config());
  ModelSource checkpoint;
  checkpoint.kind = SourceKind::kCheckpoint;
  checkpoint.path = "ckpt";
  auto entry = registry->Register("from-disk", checkpoint, {}, "");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->config.family, models::Family::kQwen2);
  std::ofstream(base_ / "root" / "ckpt" / "model.safetensors", std::ios::trunc) << "not a checkpoint";
  checkpoint.path = "ckpt";
  auto broken = registry->Register("broken", checkpoint, {}, "");
  EXPECT_EQ(ErrorReasonOf(broken.status()), "INVALID_MODEL_FILE");
  // Found by the wire fuzzer: a refused registration took the name as a FAILED model.
  EXPECT_EQ(ErrorReasonOf(registry->Get("broken").status()), "MODEL_NOT_FOUND");
  std::ofstream(base_ / "root" / "ckpt" / "model.safetensors", std::ios::trunc) << "still not a checkpoint";
  EXPECT_EQ(ErrorReasonOf(registry->Register("broken", checkpoint, {}, "").status()), "INVALID_MODEL_FILE")
      << "the name is free to try again";
}

// Found by a hostile review: a registered checkpoint's file replaced on disk (same shapes, other
// values) ran every later job on the new weights under the registered digest. Every load that
// reads files checks the digest; a mismatch fails naming both, and the registration is FAILED
// (MODEL_CHANGED) until its owner registers it again.
TEST_F(RegistryTest, WeightsChangedOnDiskFailEveryLaterLoadNamingBothDigests) {
  fs::create_directories(base_ / "root" / "ckpt");
  const std::string weights = (base_ / "root" / "ckpt" / "model.safetensors").string();
  const auto write_model = [&](uint64_t seed) {
    auto model = std::move(*models::BuildModel(*models::PresetConfig("gpt2-tiny"), seed));
    ASSERT_TRUE(models::ExportWeights(*model, weights).ok());
    std::ofstream(base_ / "root" / "ckpt" / "config.json") << models::ConfigToHuggingFaceJson(model->config());
  };
  write_model(5);
  ModelSource checkpoint;
  checkpoint.kind = SourceKind::kCheckpoint;
  checkpoint.path = "ckpt";
  std::string registered;
  {
    auto registry = Open();
    auto entry = registry->Register("ckpt", checkpoint, {}, "");
    ASSERT_TRUE(entry.ok()) << entry.status();
    registered = entry->weights_sha256;
    ASSERT_EQ(registered.size(), 64u);
    EXPECT_EQ(Sha256OfFile(weights).value(), registered) << "the canonical file's digest, as ExportModel sends it";
    write_model(6);  // Same shapes, other values.
    ASSERT_TRUE(registry->Acquire("ckpt").ok()) << "the model kept in memory is the registered one";
    registry->cache.Forget("ckpt");  // It leaves the cache: the next load reads the file.
    const absl::Status changed = registry->Acquire("ckpt").status();
    EXPECT_EQ(changed.code(), absl::StatusCode::kFailedPrecondition) << changed;
    EXPECT_EQ(ErrorReasonOf(changed), "MODEL_CHANGED");
    const std::string now = Sha256OfFile(weights).value();
    EXPECT_NE(changed.message().find("registered SHA-256 " + registered + ", read now " + now), std::string::npos)
        << changed.message();
    auto marked = registry->Get("ckpt");
    ASSERT_TRUE(marked.ok());
    EXPECT_EQ(marked->state, ModelState::kFailed);
    EXPECT_EQ(marked->error_reason, "MODEL_CHANGED");
    EXPECT_EQ(ErrorReasonOf(registry->Export("ckpt", (base_ / "out.safetensors").string())), "MODEL_NOT_READY")
        << "nothing streams the new file under the old digest";
  }
  // After a restart the same: the file is still not what was registered.
  write_model(5);
  {
    auto registry = Open();
    ASSERT_TRUE(registry->Delete("ckpt", false, 0).ok());
    ASSERT_TRUE(registry->Register("ckpt", checkpoint, {}, "").ok()) << "its owner registers it again";
    write_model(7);
  }
  auto restarted = Open();
  const absl::Status after_restart = restarted->Acquire("ckpt").status();
  EXPECT_EQ(ErrorReasonOf(after_restart), "MODEL_CHANGED") << after_restart;
}

// Uploads and folder registrations of the same bytes give the same digest, and an export uploaded
// again keeps it: the digest is the canonical float32 file's, whatever the source.
TEST_F(RegistryTest, AnUploadAndAFolderOfTheSameWeightsShareOneDigestAndExportRoundTripsIt) {
  auto registry = Open();
  fs::create_directories(base_ / "root" / "bf16");
  auto model = std::move(*models::BuildModel(*models::PresetConfig("qwen2-tiny"), 9));
  const std::string weights = (base_ / "root" / "bf16" / "model.safetensors").string();
  ASSERT_TRUE(models::ExportWeights(*model, weights, safetensors::DType::kBF16).ok());
  const std::string config = models::ConfigToHuggingFaceJson(model->config());
  std::ofstream(base_ / "root" / "bf16" / "config.json") << config;
  ModelSource folder;
  folder.kind = SourceKind::kCheckpoint;
  folder.path = "bf16";
  auto from_folder = registry->Register("folder", folder, {}, "");
  ASSERT_TRUE(from_folder.ok()) << from_folder.status();
  const auto upload = [&](const std::string& name, const std::string& file) {
    const std::string staged = registry->catalog->uploads_dir() + "/staged-" + name;
    fs::copy_file(file, staged);
    return registry->catalog->RegisterUpload(name, staged, config, {}, {}, "");
  };
  auto uploaded = upload("uploaded", weights);
  ASSERT_TRUE(uploaded.ok()) << uploaded.status();
  EXPECT_EQ(uploaded->weights_sha256, from_folder->weights_sha256) << "the same bytes, the same digest";
  EXPECT_NE(uploaded->weights_sha256, Sha256OfFile(weights).value()) << "not the bfloat16 stream's own digest";
  const std::string exported = (base_ / "exported.safetensors").string();
  ASSERT_TRUE(registry->Export("uploaded", exported).ok());
  EXPECT_EQ(Sha256OfFile(exported).value(), uploaded->weights_sha256) << "ExportModel's stream matches the model";
  auto again = upload("again", exported);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->weights_sha256, uploaded->weights_sha256) << "export -> upload keeps the digest";
}

// Found by a two-tenant review: lab-b made lab-b/pub1/ with a config.json and a model.safetensors
// linking to lab-a's private checkpoint, an admin registered it as a public model, and lab-b
// exported lab-a's weights. Files under <root>/<tenant>/ are opened with that tenant's scope
// whoever registers them, at registration and at every later read.
TEST_F(RegistryTest, APublicModelOfATenantsFolderOpensItsFilesWithinThatTenantsWall) {
  auto registry = Open();
  const fs::path root = base_ / "root";
  for (const char* dir : {"lab-a/ckpt", "lab-b/pub1", "lab-b/pub"}) fs::create_directories(root / dir);
  auto lab_a = std::move(*models::BuildModel(*models::PresetConfig("gpt2-tiny"), 11));
  ASSERT_TRUE(models::ExportWeights(*lab_a, (root / "lab-a/ckpt/model.safetensors").string()).ok());
  const std::string config = models::ConfigToHuggingFaceJson(lab_a->config());
  for (const char* dir : {"lab-a/ckpt", "lab-b/pub1", "lab-b/pub"}) std::ofstream(root / dir / "config.json") << config;
  fs::create_symlink("../../lab-a/ckpt/model.safetensors", root / "lab-b/pub1/model.safetensors");
  ModelSource source;
  source.kind = SourceKind::kCheckpoint;
  source.path = "lab-b/pub1";
  const auto linked = registry->Register("pub1", source, {}, "");
  EXPECT_EQ(ErrorReasonOf(linked.status()), "PATH_NOT_ALLOWED") << linked.status();
  EXPECT_NE(std::string(linked.status().message()).find("lab-b/"), std::string::npos) << linked.status();
  // The same through a folder link at the path's start, and for the folder itself.
  source.path = "lab-b";
  fs::create_symlink("../lab-a/ckpt/model.safetensors", root / "lab-b/model.safetensors");
  std::ofstream(root / "lab-b/config.json") << config;
  EXPECT_EQ(ErrorReasonOf(registry->Register("pub0", source, {}, "").status()), "PATH_NOT_ALLOWED");
  // Variant: a clean folder is registered, then the link swapped in; once the cached copy is
  // gone, the next read (an export) is refused.
  auto clean = std::move(*models::BuildModel(*models::PresetConfig("gpt2-tiny"), 12));
  ASSERT_TRUE(models::ExportWeights(*clean, (root / "lab-b/pub/model.safetensors").string()).ok());
  source.path = "lab-b/pub";
  ASSERT_TRUE(registry->Register("pub", source, {}, "").ok());
  fs::remove(root / "lab-b/pub/model.safetensors");
  fs::create_symlink("../../lab-a/ckpt/model.safetensors", root / "lab-b/pub/model.safetensors");
  registry->cache.Forget("pub");
  const std::string file = (base_ / "export.safetensors").string();
  EXPECT_EQ(ErrorReasonOf(registry->Export("pub", file)), "PATH_NOT_ALLOWED");
  EXPECT_FALSE(fs::exists(file));
  // lab-a's own public registration of its folder still works: the wall is lab-a's.
  source.path = "lab-a/ckpt";
  EXPECT_TRUE(registry->Register("a-public", source, {}, "").ok());
}

// gpt2-tiny's float32 parameter bytes, as the cache estimates them before building.
int64_t TinyBytes() { return static_cast<int64_t>(4 * models::EstimatedParameters(*models::PresetConfig("gpt2-tiny"))); }

TEST_F(RegistryTest, EvictsTheLeastRecentlyUsedModelBeyondTheCacheBudget) {
  auto registry = Open(/*cache_bytes=*/TinyBytes() * 3 / 2);  // Room for one model at a time.
  ASSERT_TRUE(registry->Register("a", TinyPreset(1), {}, "").ok());
  ASSERT_TRUE(registry->Register("b", TinyPreset(2), {}, "").ok());
  const int64_t loads = registry->loads();  // Both were loaded once at registration.
  ASSERT_TRUE(registry->Acquire("b").ok());  // Cached: the most recent.
  EXPECT_EQ(registry->loads(), loads);
  ASSERT_TRUE(registry->Acquire("a").ok());  // Evicted when b was registered: loaded again.
  EXPECT_EQ(registry->loads(), loads + 1);
  ASSERT_TRUE(registry->Acquire("a").ok());  // Cached now.
  EXPECT_EQ(registry->loads(), loads + 1);
  EXPECT_LE(registry->cache.used_bytes(), TinyBytes() * 3 / 2);
}

// A comparison job's init is built for the job and not kept: it holds its room in the budget
// while the job holds it (so the next build waits, or evicts what nobody holds), and gives it back
// when let go; it is the preset's own seeded initialization.
TEST_F(RegistryTest, AModelBuiltForAJobHoldsItsRoomInTheBudgetUntilItIsLetGo) {
  auto registry = Open(/*cache_bytes=*/TinyBytes() * 5 / 2);
  ASSERT_TRUE(registry->Register("a", TinyPreset(1), {}, "").ok());
  auto kept = registry->Acquire("a");
  ASSERT_TRUE(kept.ok());
  EXPECT_EQ(registry->cache.used_bytes(), TinyBytes());
  auto init = registry->cache.BuildForJob("a (init)", (*kept)->config(), 1);
  ASSERT_TRUE(init.ok()) << init.status();
  EXPECT_EQ(registry->cache.used_bytes(), 2 * TinyBytes());  // a kept, and the init's room.
  auto xs = (*init)->NamedParameters(), ys = (*kept)->NamedParameters();
  ASSERT_EQ(xs.size(), ys.size());
  for (size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(torch::equal(xs[i].second, ys[i].second)) << xs[i].first;  // The registration's seeded init.
  }
  // Let go, its room is given back, and another model fits.
  init->reset();
  EXPECT_EQ(registry->cache.used_bytes(), TinyBytes());
  ASSERT_TRUE(registry->Register("b", TinyPreset(2), {}, "").ok());
  EXPECT_LE(registry->cache.used_bytes(), 2 * TinyBytes());
}

// Found by measuring: ExportModel of a built-in preset built the whole model whatever the budget
// (three exports of qwen2-0.5b with --model-cache-mb 1024 took 6.8 GB).
TEST_F(RegistryTest, AModelLargerThanTheCacheBudgetIsNeverBuiltNotEvenToExportABuiltInPreset) {
  auto registry = Open(/*cache_bytes=*/int64_t{1} << 20);  // gpt2 needs about 500 MiB.
  const std::string file = (base_ / "gpt2.safetensors").string();
  const absl::Status refused = registry->Export("gpt2", file);
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(refused), "INSUFFICIENT_MEMORY");
  EXPECT_NE(std::string(refused.message()).find("--model-cache-mb"), std::string::npos) << refused;
  EXPECT_EQ(registry->loads(), 0) << "nothing was built";
  EXPECT_FALSE(fs::exists(file));
  EXPECT_EQ(registry->Get("gpt2").value().state, ModelState::kReady) << "a refusal is not a failed model";
}

TEST_F(RegistryTest, AJobsBuildWaitsUntilTheModelsOthersHoldLeaveRoomInTheBudget) {
  auto registry = Open(/*cache_bytes=*/TinyBytes() * 3 / 2);
  ASSERT_TRUE(registry->Register("a", TinyPreset(1), {}, "").ok());
  ASSERT_TRUE(registry->Register("b", TinyPreset(2), {}, "").ok());
  auto held = registry->Acquire("a");  // A job measures a: it cannot be evicted.
  ASSERT_TRUE(held.ok());
  std::atomic<bool> done{false};
  std::atomic<int> asked{0};  // The build asks whether to stop only while it waits for room.
  std::thread other_job([&] {
    EXPECT_TRUE(registry->Acquire("b", jobs::ComputeDtype::kFloat32, [&] { return ++asked < 0; }).ok());
    done = true;
  });
  EXPECT_TRUE(test_support::Eventually([&] { return asked > 0; })) << "b's build waits for room";
  EXPECT_FALSE(done) << "a and b together do not fit: b waits";
  EXPECT_LE(registry->cache.used_bytes(), TinyBytes() * 3 / 2);
  held->reset();  // The first job ends.
  other_job.join();
  EXPECT_TRUE(done);
  EXPECT_LE(registry->cache.used_bytes(), TinyBytes() * 3 / 2);
}

TEST_F(RegistryTest, AnExportWaitsForRoomAtMostTheCallWaitAndStopsWhenItsClientGoesAway) {
  Registry registry(ModelCache::Options{.budget_bytes = TinyBytes() * 3 / 2, .call_wait = std::chrono::milliseconds(300)});
  registry.catalog = *ModelCatalog::Open({(base_ / "root").string(), (base_ / "data").string()}, &registry.cache);
  ASSERT_TRUE(registry.Register("a", TinyPreset(1), {}, "").ok());
  auto held = registry.Acquire("a");
  ASSERT_TRUE(held.ok());
  const std::string file = (base_ / "export.safetensors").string();
  const auto loads = registry.loads();
  const auto start = std::chrono::steady_clock::now();
  const absl::Status full = registry.Export("gpt2-tiny", file);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(300));
  EXPECT_EQ(full.code(), absl::StatusCode::kResourceExhausted) << full;
  EXPECT_NE(std::string(full.message()).find("try again"), std::string::npos) << full;
  // The client goes away while the export waits: asked again after the first wait, it is gone.
  std::atomic<int> asked{0};
  EXPECT_EQ(registry.Export("gpt2-tiny", file, [&] { return ++asked > 1; }).code(), absl::StatusCode::kCancelled);
  EXPECT_GE(asked.load(), 2);
  EXPECT_EQ(registry.loads(), loads) << "neither export built anything";
  EXPECT_FALSE(fs::exists(file));
  held->reset();
  EXPECT_TRUE(registry.Export("gpt2-tiny", file).ok()) << "room again";
  EXPECT_EQ(registry.Export("gpt2-tiny", file, [] { return true; }).code(), absl::StatusCode::kCancelled)
      << "a cached model's export stops too";
}

TEST_F(RegistryTest, AnApiOnlyProcessKeepsNoModelAndBuildsARegistrationOnceForItsHash) {
  Registry registry(TinyBytes() * 3 / 2, /*keep_models=*/false);
  registry.catalog = *ModelCatalog::Open({(base_ / "root").string(), (base_ / "data").string()}, &registry.cache);
  auto entry = registry.Register("a", TinyPreset(1), {}, "");
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->weights_sha256.size(), 64u);
  EXPECT_EQ(registry.loads(), 1) << "the facts and the hash came from one build";
  EXPECT_EQ(registry.cache.used_bytes(), 0);
  const std::string file = (base_ / "a.safetensors").string();
  ASSERT_TRUE(registry.Export("a", file).ok());
  EXPECT_EQ(Sha256OfFile(file).value(), entry->weights_sha256);
  EXPECT_EQ(registry.loads(), 2);
  EXPECT_EQ(registry.cache.used_bytes(), 0) << "freed once written";
}

TEST_F(RegistryTest, TorchScriptIsRefusedUnlessTheOperatorAllowsIt) {
  ModelSource script;
  script.kind = SourceKind::kTorchScript;
  script.path = "inside/model.pt";
  script.width = 8;
  auto registry = Open();
  const auto refused = registry->Register("script", script, {}, "");
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "TORCHSCRIPT_DISABLED");
  EXPECT_EQ(ErrorReasonOf(registry->Get("script").status()), "MODEL_NOT_FOUND") << "nothing left behind";
  Registry allowed(int64_t{1} << 30);
  auto catalog = ModelCatalog::Open({(base_ / "root").string(), (base_ / "data").string(), true}, &allowed.cache);
  ASSERT_TRUE(catalog.ok()) << catalog.status();
  allowed.catalog = std::move(*catalog);
  EXPECT_EQ(ErrorReasonOf(allowed.Register("script", script, {}, "").status()), "PATH_NOT_FOUND")
      << "allowed: the registration goes on to look for the file";
}

// Found by reading the code: a bfloat16 job converted the one cached model in place, so later
// float32 jobs and exports used rounded weights.
TEST_F(RegistryTest, AHalfPrecisionJobMeasuresAnInstanceOfItsOwn) {
  auto registry = Open();
  ASSERT_TRUE(registry->Register("precise", TinyPreset(5), {}, "").ok());
  auto full = registry->Acquire("precise");
  ASSERT_TRUE(full.ok()) << full.status();
  const torch::Tensor before = (*full)->NamedParameters().front().second.clone();
  auto half = registry->Acquire("precise", jobs::ComputeDtype::kBfloat16);
  ASSERT_TRUE(half.ok()) << half.status();
  EXPECT_NE(half->get(), full->get());
  (*half)->To(torch::kCPU, torch::kBFloat16);  // What a bfloat16 measurement does, and back.
  (*half)->To(torch::kCPU, torch::kFloat32);
  auto again = registry->Acquire("precise");
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->get(), full->get());
  EXPECT_TRUE(torch::equal((*again)->NamedParameters().front().second, before)) << "the float32 weights are untouched";
}

// A checkpoint's trained recall task (read from its posbias_task.json at registration) is kept in
// models.json, so a restart or another replica asks the same probes by default.
TEST(ModelIndexItems, ATrainedRecallTaskSurvivesTheIndexAndAnEntryWithoutOneHasNone) {
  ModelEntry entry;
  entry.name = "recall-run";
  entry.uid = "0123456789abcdef0123456789abcdef";
  entry.state = ModelState::kReady;
  recall::MqarOptions task;
  task.pairs = 4;
  task.keys = {130, 150};
  entry.trained_recall = task;
  auto back = EntryFromItem(ItemFromEntry(entry, "owner"));
  ASSERT_TRUE(back.ok()) << back.status();
  ASSERT_TRUE(back->trained_recall.has_value());
  EXPECT_EQ(back->trained_recall->pairs, 4);
  EXPECT_EQ(back->trained_recall->keys.first, 130);
  EXPECT_EQ(back->trained_recall->values.first, 192);
  entry.trained_recall.reset();
  auto plain = EntryFromItem(ItemFromEntry(entry, "owner"));
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->trained_recall.has_value());
}

}  // namespace
}  // namespace posbias::registry
