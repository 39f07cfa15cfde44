#include "server/registry/model_cache.h"

#include <chrono>

#include "absl/strings/str_cat.h"
#include "server/models/weights.h"
#include "server/status/error.h"

namespace posbias::registry {

namespace {

constexpr auto kFloat32 = jobs::ComputeDtype::kFloat32;

// What a load tells the catalog about the model it built.
LoadedModel Facts(models::DecoderModel& model) {
  return {model.config(), models::ParameterCount(model), model.init_recipe()};
}

}  // namespace

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

void ModelCache::Keep(const std::string& name, jobs::ComputeDtype dtype, std::shared_ptr<models::DecoderModel> model) {
  std::lock_guard lock(mutex_);
  cache_.remove_if([&](const Cached& item) { return item.name == name && item.dtype == dtype; });
  const int64_t bytes = models::ParameterCount(*model) * 4;
  cache_.push_front({name, dtype, std::move(model), bytes});
  int64_t used = 0;
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

void ModelCache::Forget(const std::string& name) {
  std::lock_guard lock(mutex_);
  cache_.remove_if([&](const Cached& item) { return item.name == name; });
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelCache::Build(const LoadRequest& request) {
  ++loads_;
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::unique_ptr<models::DecoderModel>> model;
  if (request.kind == SourceKind::kTorchScript) {
    model = models::LoadTorchScriptModel(request.weights_path, request.config.hidden_size);
  } else {
    model = models::BuildModel(request.config, request.seed);
    if (model.ok() && !request.weights_path.empty()) {
      if (auto status = models::LoadWeightsFromPath(**model, request.weights_path); !status.ok()) return status;
    }
  }
  if (!model.ok()) return model.status();
  if (options_.on_load) options_.on_load(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return std::shared_ptr<models::DecoderModel>(std::move(*model));
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelCache::FindOrBuild(const LoadRequest& request) {
  if (auto cached = Find(request.name, kFloat32)) return cached;
  auto model = Build(request);
  if (model.ok()) Keep(request.name, kFloat32, *model);
  return model;
}

absl::StatusOr<LoadedModel> ModelCache::Load(const LoadRequest& request) {
  Forget(request.name);  // A registration: whatever was kept under this name is not this model.
  auto model = Build(request);
  if (!model.ok()) return model.status();
  Keep(request.name, kFloat32, *model);
  return Facts(**model);
}

absl::Status ModelCache::Export(const LoadRequest& request, const std::string& path) {
  std::lock_guard instance(InstanceLock(request.name, kFloat32));
  auto model = FindOrBuild(request);
  if (!model.ok()) return model.status();
  return models::ExportWeights(**model, path);
}

std::mutex& ModelCache::InstanceLock(const std::string& name, jobs::ComputeDtype dtype) {
  std::lock_guard lock(locks_mutex_);
  auto& slot = instance_locks_[{name, dtype}];
  if (!slot) slot = std::make_unique<std::mutex>();
  return *slot;
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelCache::Acquire(ModelCatalog& catalog,
                                                                          const std::string& name,
                                                                          jobs::ComputeDtype dtype) {
  auto request = catalog.RequestFor(name);  // Not found, failed, or another replica's still loading.
  if (!request.ok()) return request.status();
  if (auto cached = Find(name, dtype)) return cached;
  auto model = Build(*request);
  if (!model.ok()) {
    catalog.RecordLoadFailure(name, model.status());
    return model.status();
  }
  catalog.RecordLoaded(name, Facts(**model));
  Keep(name, dtype, *model);
  return model;
}

}  // namespace posbias::registry
