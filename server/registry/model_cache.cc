#include "server/registry/model_cache.h"

#include <chrono>
#include <filesystem>
#include <optional>

#include "absl/strings/str_cat.h"
#include "server/models/weights.h"
#include "server/registry/sha256.h"
#include "server/status/error.h"

namespace posbias::registry {

namespace {

constexpr auto kFloat32 = jobs::ComputeDtype::kFloat32;

// What a load tells the catalog about the model it built (the digest is the caller's to add).
LoadedModel Facts(models::DecoderModel& model) {
  return {model.config(), models::ParameterCount(model), model.init_recipe(), ""};
}

// Whether a model has weights to digest: TorchScript archives and the Cesaro model have none.
bool HasDigest(const LoadRequest& request) {
  return request.kind != SourceKind::kTorchScript && request.config.family != models::Family::kCesaro;
}

// SHA-256 of the canonical float32 file of the parameters in memory (models::StreamWeights): the
// bytes a job measures, hashed after they were read, so no file swapped between a hash and a read
// can pass.
absl::StatusOr<std::string> WeightsDigest(models::DecoderModel& model, const Cancelled& cancelled) {
  Sha256 sha;
  const auto into_hash = [&sha](const void* bytes, size_t size) {
    sha.Update(static_cast<const char*>(bytes), size);
    return true;
  };
  if (auto status = models::StreamWeights(model, into_hash, cancelled); !status.ok()) return status;
  return sha.HexDigest();
}

// A load that read files must find the weights its registration recorded.
absl::Status CheckDigest(const LoadRequest& request, models::DecoderModel& model, const Cancelled& cancelled) {
  if (request.weights_sha256.empty() || request.weights_path.empty() || !HasDigest(request)) return absl::OkStatus();
  auto digest = WeightsDigest(model, cancelled);
  if (!digest.ok()) return digest.status();
  if (*digest == request.weights_sha256) return absl::OkStatus();
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelChanged,
                         absl::StrCat("the weights of the model ", request.name, " changed on disk since it was registered: "
                                      "registered SHA-256 ", request.weights_sha256, ", read now ", *digest,
                                      "; nothing runs on them until its owner deletes the model and registers it again"));
}

}  // namespace

ModelCache::Reservation::~Reservation() {
  if (cache_ == nullptr) return;
  {
    std::lock_guard lock(cache_->mutex_);
    cache_->building_bytes_ -= bytes_;
  }
  cache_->room_.notify_all();
}

std::shared_ptr<models::DecoderModel> ModelCache::Find(const std::string& name, jobs::ComputeDtype dtype) {
  std::lock_guard lock(mutex_);
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->name == name && it->dtype == dtype) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().model;
    }
  }
  return nullptr;
}

int64_t ModelCache::KeptBytesLocked() const {
  int64_t bytes = 0;
  for (const Cached& item : cache_) bytes += item.bytes;
  return bytes;
}

int64_t ModelCache::used_bytes() {
  std::lock_guard lock(mutex_);
  return KeptBytesLocked() + building_bytes_;
}

std::shared_ptr<models::DecoderModel> ModelCache::Keep(const std::string& name, jobs::ComputeDtype dtype, Built built) {
  if (!options_.keep_models) return std::move(built.model);  // Its reservation goes when it is freed.
  {
    std::lock_guard lock(mutex_);
    cache_.remove_if([&](const Cached& item) { return item.name == name && item.dtype == dtype; });
    // The reservation becomes the entry's bytes, under the same lock: never counted twice or not at all.
    building_bytes_ -= built.reservation.bytes();
    cache_.push_front({name, dtype, built.model, built.reservation.bytes()});
    built.reservation.Release();
    int64_t used = building_bytes_;
    for (auto it = cache_.begin(); it != cache_.end();) {
      // Evict least recently used models beyond the budget unless a job holds them.
      if (used + it->bytes > options_.budget_bytes && it != cache_.begin() && it->model.use_count() == 1) {
        it = cache_.erase(it);
      } else {
        used += it->bytes;
        ++it;
      }
    }
  }
  room_.notify_all();
  return std::move(built.model);
}

void ModelCache::Forget(const std::string& name) {
  {
    std::lock_guard lock(mutex_);
    cache_.remove_if([&](const Cached& item) { return item.name == name; });
  }
  room_.notify_all();
}

int64_t ModelCache::EstimatedBytes(const LoadRequest& request) {
  if (request.kind != SourceKind::kTorchScript) {
    return static_cast<int64_t>(4.0 * models::EstimatedParameters(request.config));
  }
  std::error_code ignored;  // A TorchScript file's size is what loading it holds, about.
  const auto size = std::filesystem::file_size(request.weights_path, ignored);
  return ignored ? 0 : static_cast<int64_t>(size);
}

ModelCache::Wait ModelCache::CallWait(Cancelled cancelled) const {
  return {std::chrono::steady_clock::now() + options_.call_wait, std::move(cancelled)};
}

absl::StatusOr<ModelCache::Reservation> ModelCache::Reserve(const std::string& name, int64_t bytes, const Wait& wait) {
  const int64_t budget = options_.budget_bytes;
  if (bytes > budget) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           absl::StrCat("the model ", name, "'s float32 parameters need ", bytes >> 20,
                                        " MiB, more than the model cache's ", budget >> 20, " MiB (--model-cache-mb)"));
  }
  std::unique_lock lock(mutex_);
  while (true) {
    // Models nobody holds make room first, least recently used first.
    int64_t used = building_bytes_ + KeptBytesLocked();
    for (auto it = cache_.end(); used + bytes > budget && it != cache_.begin();) {
      --it;
      if (it->model.use_count() != 1) continue;
      used -= it->bytes;
      it = cache_.erase(it);
    }
    if (used + bytes <= budget) {
      building_bytes_ += bytes;
      return Reservation(this, bytes);
    }
    // Asked without the cache's lock: a job's check writes its progress to the store.
    bool stop = false;
    if (wait.cancelled) {
      lock.unlock();
      stop = wait.cancelled();
      lock.lock();
    }
    if (stop) {
      return absl::CancelledError(absl::StrCat("stopped (the caller went away, or its job was cancelled or stopped) while ",
                                               name, " waited for room in the model cache"));
    }
    if (wait.deadline && std::chrono::steady_clock::now() >= *wait.deadline) {
      return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                             absl::StrCat("the model cache's ", budget >> 20, " MiB (--model-cache-mb) are held by ",
                                          used >> 20, " MiB of models in use or being built; ", name, " needs ",
                                          bytes >> 20, " MiB: try again when running jobs have finished"));
    }
    // Holders give models back without a signal: look again every 100 ms.
    room_.wait_for(lock, std::chrono::milliseconds(100));
  }
}

absl::StatusOr<ModelCache::Built> ModelCache::Build(const LoadRequest& request, const Wait& wait, bool* admitted) {
  if (admitted != nullptr) *admitted = false;
  auto reservation = Reserve(request.name, EstimatedBytes(request), wait);
  if (!reservation.ok()) return reservation.status();
  if (admitted != nullptr) *admitted = true;
  ++loads_;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<models::DecoderModel>> model;
  if (request.kind == SourceKind::kTorchScript) {
    model = models::LoadTorchScriptModel(request.weights_path, request.config.hidden_size, request.scope);
  } else {
    model = models::BuildModel(request.config, request.seed);
    if (model.ok() && !request.weights_path.empty()) {
      if (auto status = models::LoadWeightsFromPath(**model, request.weights_path, request.scope, wait.cancelled);
          !status.ok()) {
        return status;
      }
      if (auto status = CheckDigest(request, **model, wait.cancelled); !status.ok()) return status;
    }
  }
  if (!model.ok()) return model.status();
  if (options_.on_load) options_.on_load(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return Built{std::shared_ptr<models::DecoderModel>(std::move(*model)), *std::move(reservation)};
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelCache::BuildForJob(const std::string& name,
                                                                              const models::ModelConfig& config,
                                                                              uint64_t seed, const Cancelled& stop) {
  LoadRequest request;
  request.name = name;
  request.config = config;
  request.seed = seed;
  auto built = Build(request, Wait{std::nullopt, stop});
  if (!built.ok()) return built.status();
  // The room is given back when the model is freed: the deleter owns the reservation.
  auto room = std::make_shared<Reservation>(std::move(built->reservation));
  models::DecoderModel* model = built->model.get();
  return std::shared_ptr<models::DecoderModel>(model, [owner = std::move(built->model), room](models::DecoderModel*) mutable {
    owner.reset();
    room.reset();
  });
}

absl::StatusOr<LoadedModel> ModelCache::Load(const LoadRequest& request, const Cancelled& cancelled) {
  Forget(request.name);  // A registration: whatever was kept under this name is not this model.
  auto built = Build(request, CallWait(cancelled));
  if (!built.ok()) return built.status();
  LoadedModel facts = Facts(*built->model);
  if (HasDigest(request)) {
    auto digest = WeightsDigest(*built->model, cancelled);
    if (!digest.ok()) return digest.status();
    facts.weights_sha256 = *digest;
  }
  if (options_.keep_models) Keep(request.name, kFloat32, *std::move(built));
  return facts;  // Not kept: the model and its room are freed with `built`.
}

absl::Status ModelCache::Export(const LoadRequest& request, const std::string& path, const Cancelled& cancelled) {
  std::lock_guard instance(InstanceLock(request.name, kFloat32));
  std::optional<Reservation> held;
  std::shared_ptr<models::DecoderModel> model = Find(request.name, kFloat32);
  if (!model) {
    auto built = Build(request, CallWait(cancelled));
    if (!built.ok()) return built.status();
    model = built->model;
    if (options_.keep_models) {
      Keep(request.name, kFloat32, *std::move(built));
    } else {
      held.emplace(std::move(built->reservation));
    }
  }
  if (cancelled && cancelled()) return absl::CancelledError("the client went away before the export was written");
  return models::ExportWeights(*model, path, safetensors::DType::kF32, cancelled);
}

std::timed_mutex& ModelCache::InstanceLock(const std::string& name, jobs::ComputeDtype dtype) {
  std::lock_guard lock(locks_mutex_);
  auto& slot = instance_locks_[{name, dtype}];
  if (!slot) slot = std::make_unique<std::timed_mutex>();
  return *slot;
}

absl::StatusOr<std::unique_lock<std::timed_mutex>> ModelCache::LockInstance(std::timed_mutex& lock,
                                                                           const Cancelled& stop) {
  std::unique_lock held(lock, std::defer_lock);
  while (!held.try_lock_for(std::chrono::milliseconds(100))) {
    if (stop && stop()) return absl::CancelledError("stopped while waiting for another job to finish with the model");
  }
  return held;
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelCache::Acquire(ModelCatalog& catalog,
                                                                          const std::string& name,
                                                                          jobs::ComputeDtype dtype,
                                                                          const Cancelled& stop) {
  auto request = catalog.RequestFor(name);  // Not found, failed, or another replica's still loading.
  if (!request.ok()) return request.status();
  if (auto cached = Find(name, dtype)) return cached;
  bool admitted = false;
  auto built = Build(*request, Wait{std::nullopt, stop}, &admitted);  // A worker waits for room until stopped.
  if (!built.ok()) {
    if (admitted) catalog.RecordLoadFailure(name, built.status());
    return built.status();
  }
  catalog.RecordLoaded(name, Facts(*built->model));
  return Keep(name, dtype, *std::move(built));
}

}  // namespace posbias::registry
