// The torch side of the registry: models in memory. ModelCache is the catalog's ModelLoader (it
// builds a model at its seeded initialization, loads checkpoint weights or a TorchScript file) and
// keeps loaded models within a memory budget, least recently used first out, reloaded on demand.
// A model a job holds (its shared_ptr) is never evicted.
//
// The budget (--model-cache-mb) bounds every model a client can make this process build, not only
// the ones it keeps: a build is admitted only when the float32 parameters of the models kept, of
// the builds in flight and of the new one fit in it. Admission first evicts models nobody holds,
// then waits for holders and other builds to finish: a job's worker waits as long as that takes
// (jobs end) but stops the moment its job is cancelled, runs past its time limit or the server
// shuts down (the runner's `stop`), a call (an export, a registration) waits at most
// Options::call_wait and is then refused, and a call whose client went away stops waiting. A
// model larger than the whole budget is never built: RESOURCE_EXHAUSTED / INSUFFICIENT_MEMORY
// naming the flag. A job holds one model at a time (runners/jacobian_runner.cc), so waiting for
// room never waits on a model its own job holds, and two jobs can never wait on each other.
//
// One instance per compute dtype: a measurement converts the model it measures to its dtype, so a
// bfloat16 job gets a bfloat16 instance of its own and the float32 instance (which float32 jobs,
// exports and the weights hash use) never holds rounded weights.
//
// Lock order: the catalog may call Load/Export/Forget while holding its own lock; the cache never
// calls the catalog while holding its lock.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
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
    // Float32 parameter bytes of the models kept and being built, at most (--model-cache-mb).
    int64_t budget_bytes = int64_t{8} << 30;
    // Keep built models for the calls that follow. An API-only process, which builds a model only
    // to export or hash it, keeps none: each is freed once written.
    bool keep_models = true;
    // The longest a call (not a job) waits for room in the budget before it is refused.
    std::chrono::milliseconds call_wait{std::chrono::seconds(30)};
    std::function<void(double)> on_load = nullptr;  // Seconds each build/load took (metrics).
  };
  explicit ModelCache(Options options) : options_(std::move(options)) {}

  // The named model, loaded on demand (a failed load marks it FAILED in the catalog; a build that
  // the budget refuses does not). Callers hold the shared_ptr while measuring. A job's worker
  // calls this: it waits for room in the budget until there is room or `stop` turns true (then
  // CANCELLED; `stop` is asked about every 100 ms while waiting).
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> Acquire(
      ModelCatalog& catalog, const std::string& name, jobs::ComputeDtype dtype = jobs::ComputeDtype::kFloat32,
      const Cancelled& stop = nullptr);

  // A model built for one job and not kept (a comparison job's `init`: a registered model's
  // architecture at a seeded initialization): it takes its room in the budget like any build,
  // waiting as a job's build does (until `stop`), until the last holder of the returned model
  // lets it go.
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> BuildForJob(const std::string& name,
                                                                    const models::ModelConfig& config, uint64_t seed,
                                                                    const Cancelled& stop = nullptr);

  absl::StatusOr<LoadedModel> Load(const LoadRequest& request, const Cancelled& cancelled = nullptr) override;
  absl::Status Export(const LoadRequest& request, const std::string& path, const Cancelled& cancelled) override;
  void Forget(const std::string& name) override;

  // The lock of the named model's `dtype` instance. A measurement holds it while it moves the model
  // to its device and freezes its parameters; Export holds the float32 one while it reads the
  // weights, so an export never sees a model mid-move. Never held while taking the cache's lock
  // is required: Acquire may be called under it. Timed, so that a job waiting for it can see its
  // cancellation (LockInstance).
  std::timed_mutex& InstanceLock(const std::string& name, jobs::ComputeDtype dtype);
  // Takes `lock` (an instance lock), asking `stop` every 100 ms while another holder has it:
  // CANCELLED when `stop` turned true first.
  static absl::StatusOr<std::unique_lock<std::timed_mutex>> LockInstance(std::timed_mutex& lock, const Cancelled& stop);

  // Models built or loaded so far (cache misses), for tests and metrics.
  int64_t loads() const { return loads_; }
  // Float32 parameter bytes of the models kept plus the builds in flight (at most the budget).
  int64_t used_bytes();

 private:
  struct Cached {
    std::string name;
    jobs::ComputeDtype dtype = jobs::ComputeDtype::kFloat32;
    std::shared_ptr<models::DecoderModel> model;
    int64_t bytes = 0;
  };
  // Room in the budget for one build in flight, given back when destroyed (or taken over by Keep).
  class Reservation {
   public:
    Reservation(ModelCache* cache, int64_t bytes) : cache_(cache), bytes_(bytes) {}
    Reservation(Reservation&& other) noexcept : cache_(std::exchange(other.cache_, nullptr)), bytes_(other.bytes_) {}
    Reservation& operator=(Reservation&&) = delete;
    ~Reservation();
    int64_t bytes() const { return bytes_; }
    void Release() { cache_ = nullptr; }  // Accounted elsewhere from now on.

   private:
    ModelCache* cache_;
    int64_t bytes_;
  };
  // A model just built, with the room it occupies until the cache keeps it (or it is freed).
  struct Built {
    std::shared_ptr<models::DecoderModel> model;
    Reservation reservation;
  };
  // How long a build waits for room: until `deadline` (none: as long as it takes) or until the
  // caller goes away.
  struct Wait {
    std::optional<std::chrono::steady_clock::time_point> deadline;
    Cancelled cancelled;
  };
  Wait CallWait(Cancelled cancelled) const;

  // The instance for `dtype`, marked most recent; nullptr when none is kept.
  std::shared_ptr<models::DecoderModel> Find(const std::string& name, jobs::ComputeDtype dtype);
  // Room for `bytes`: evicts models nobody holds, then waits (see the file comment).
  absl::StatusOr<Reservation> Reserve(const std::string& name, int64_t bytes, const Wait& wait);
  // The model's float32 parameter bytes, before it is built.
  static int64_t EstimatedBytes(const LoadRequest& request);
  // Admission, then the build; `admitted` says whether an error came after admission (a failed
  // build rather than a full budget).
  absl::StatusOr<Built> Build(const LoadRequest& request, const Wait& wait, bool* admitted = nullptr);
  // Keeps the model (when the options say so), taking over its reservation; returns the model.
  std::shared_ptr<models::DecoderModel> Keep(const std::string& name, jobs::ComputeDtype dtype, Built built);
  int64_t KeptBytesLocked() const;

  Options options_;
  std::mutex mutex_;
  std::condition_variable room_;  // Signalled when a reservation is given back or a model evicted.
  std::list<Cached> cache_;       // Most recent at the front.
  int64_t building_bytes_ = 0;    // Reservations of builds in flight (guarded by mutex_).
  std::mutex locks_mutex_;        // Guards instance_locks_ (the locks live as long as the cache).
  std::map<std::pair<std::string, jobs::ComputeDtype>, std::unique_ptr<std::timed_mutex>> instance_locks_;
  std::atomic<int64_t> loads_{0};
};

}  // namespace posbias::registry
