// The torch side of the registry: models in memory. ModelCache is the catalog's ModelLoader (it
// builds a model at its seeded initialization, loads checkpoint weights or a TorchScript file) and
// keeps loaded models within a memory budget, least recently used first out, reloaded on demand.
// A model a job holds (its shared_ptr) is never evicted.
//
// One instance per compute dtype: a measurement converts the model it measures to its dtype, so a
// bfloat16 job gets a bfloat16 instance of its own and the float32 instance (which float32 jobs,
// exports and the weights hash use) never holds rounded weights.
//
// Lock order: the catalog may call Load/Export/Forget while holding its own lock; the cache never
// calls the catalog while holding its lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "absl/status/statusor.h"
#include "server/jobs/jacobian_spec.h"
#include "server/models/model.h"
#include "server/registry/model_catalog.h"
#include "server/registry/model_loader.h"

namespace posbias::registry {

class ModelCache final : public ModelLoader {
 public:
  struct Options {
    int64_t budget_bytes = int64_t{8} << 30;        // Loaded float32 parameters kept in memory.
    std::function<void(double)> on_load = nullptr;  // Seconds each build/load took (metrics).
  };
  explicit ModelCache(Options options) : options_(std::move(options)) {}

  // The named model, loaded on demand (a failed load marks it FAILED in the catalog). Callers hold
  // the shared_ptr while measuring.
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> Acquire(
      ModelCatalog& catalog, const std::string& name, jobs::ComputeDtype dtype = jobs::ComputeDtype::kFloat32);

  absl::StatusOr<LoadedModel> Load(const LoadRequest& request) override;
  absl::Status Export(const LoadRequest& request, const std::string& path) override;
  void Forget(const std::string& name) override;

  // The lock of the named model's `dtype` instance. A measurement holds it while it moves the model
  // to its device and freezes its parameters; Export holds the float32 one while it reads the
  // weights, so an export never sees a model mid-move. Never held while taking the cache's lock
  // is required: Acquire may be called under it.
  std::mutex& InstanceLock(const std::string& name, jobs::ComputeDtype dtype);

  // Models built or loaded so far (cache misses), for tests and metrics.
  int64_t loads() const { return loads_; }

 private:
  struct Cached {
    std::string name;
    jobs::ComputeDtype dtype = jobs::ComputeDtype::kFloat32;
    std::shared_ptr<models::DecoderModel> model;
    int64_t bytes = 0;
  };
  // The instance for `dtype`, marked most recent; nullptr when none is kept.
  std::shared_ptr<models::DecoderModel> Find(const std::string& name, jobs::ComputeDtype dtype);
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> Build(const LoadRequest& request);
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> FindOrBuild(const LoadRequest& request);
  void Keep(const std::string& name, jobs::ComputeDtype dtype, std::shared_ptr<models::DecoderModel> model);

  Options options_;
  std::mutex mutex_;
  std::list<Cached> cache_;  // Most recent at the front.
  std::mutex locks_mutex_;   // Guards instance_locks_ (the locks live as long as the cache).
  std::map<std::pair<std::string, jobs::ComputeDtype>, std::unique_ptr<std::mutex>> instance_locks_;
  std::atomic<int64_t> loads_{0};
};

}  // namespace posbias::registry
