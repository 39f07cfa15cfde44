#include "server/runners/runtime.h"

#include <torch/cuda.h>

#include "absl/strings/str_cat.h"
#include "server/jacobian/allocator.h"
#include "server/registry/model_cache.h"
#include "server/runners/jacobian_runner.h"

namespace posbias::runners {
namespace {

class TorchRuntime final : public Runtime {
 public:
  explicit TorchRuntime(const Options& options)
      : options_(options), cache_(registry::ModelCache::Options{
            .budget_bytes = options.model_cache_bytes, .keep_models = options.keep_models, .on_load = options.on_model_load}) {}

  registry::ModelLoader* loader() override { return &cache_; }
  jobs::JobRunner* runner(registry::ModelCatalog* catalog) override {
    if (!runner_) runner_ = std::make_unique<JacobianRunner>(catalog, &cache_, JacobianRunner::Options{options_.cpu_threads});
    return runner_.get();
  }
  int64_t last_vjp_count() const override { return runner_ ? runner_->last_vjp_count() : 0; }

 private:
  Options options_;
  registry::ModelCache cache_;
  std::unique_ptr<JacobianRunner> runner_;
};

}  // namespace

void PrepareProcessForMeasurements() { jacobian::RetainFreedMemoryDuringMeasurements(); }

int CudaDeviceCount() { return torch::cuda::is_available() ? static_cast<int>(torch::cuda::device_count()) : 0; }

std::vector<jobs::WorkerSpec> WorkerDevices(const std::string& name_prefix, bool cpu_worker) {
  std::vector<jobs::WorkerSpec> workers;
  if (cpu_worker) workers.push_back({name_prefix + "cpu-0", "cpu", "cpu"});
  for (int d = 0; d < CudaDeviceCount(); ++d) {
    workers.push_back({absl::StrCat(name_prefix, "cuda-", d), "cuda", absl::StrCat("cuda:", d)});
  }
  return workers;
}

std::unique_ptr<Runtime> Runtime::Create(const Options& options) { return std::make_unique<TorchRuntime>(options); }

}  // namespace posbias::runners
