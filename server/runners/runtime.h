// The runners room's door for the server: everything torch-side a server process runs on, behind
// torch-free types. A Runtime owns the model cache (the catalog's ModelLoader), the Jacobian-norm
// runner (a jobs::JobRunner) and knows the devices it found; the service layer composes them with
// the catalog, the store and the worker pool without seeing a tensor.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "server/jobs/worker_pool.h"
#include "server/registry/model_catalog.h"
#include "server/registry/model_loader.h"

namespace posbias::runners {

// Process-wide, once at start-up, before any measurement: the C library's allocator keeps freed
// memory during measurements (jacobian/allocator.h says why).
void PrepareProcessForMeasurements();

// CUDA devices LibTorch sees (0 on CPU-only builds and machines).
int CudaDeviceCount();

// One worker per device: "cpu-0" (when `cpu_worker`) and "cuda-N" for every CUDA device, each
// name prefixed with `name_prefix`.
std::vector<jobs::WorkerSpec> WorkerDevices(const std::string& name_prefix, bool cpu_worker);

class Runtime {
 public:
  struct Options {
    int64_t model_cache_bytes = int64_t{8} << 30;          // Float32 parameters kept and being built, at most.
    bool keep_models = true;                              // False: each model freed once used (API-only).
    std::function<void(double)> on_model_load = nullptr;  // Seconds each build/load took (metrics).
    int cpu_threads = 0;                                  // LibTorch threads for CPU jobs (0 = as is).
  };
  static std::unique_ptr<Runtime> Create(const Options& options);
  virtual ~Runtime() = default;

  // The catalog's loader (open the catalog with it), then the runner over that catalog.
  virtual registry::ModelLoader* loader() = 0;
  virtual jobs::JobRunner* runner(registry::ModelCatalog* catalog) = 0;
  // Vector-Jacobian products of the last finished job (metrics).
  virtual int64_t last_vjp_count() const = 0;
};

}  // namespace posbias::runners
