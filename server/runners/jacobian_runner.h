// Jacobian-norm jobs: a job runs on a model from the catalog (loaded through the model cache)
// through the engine, reports progress and a per-sample checkpoint to the store, resumes from that
// checkpoint after a restart, and produces the same report as posbias-measure
// (jobs/jacobian_report.h) with the registered model's provenance.
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "server/jobs/worker_pool.h"
#include "server/registry/model_cache.h"
#include "server/registry/model_catalog.h"

namespace posbias::runners {

class JacobianRunner final : public jobs::JobRunner {
 public:
  struct Options {
    int cpu_threads = 0;  // LibTorch intra-op threads for CPU jobs (0 = leave as is).
  };
  JacobianRunner(registry::ModelCatalog* catalog, registry::ModelCache* cache, Options options)
      : catalog_(catalog), cache_(cache), options_(options) {}

  absl::StatusOr<std::string> Run(const jobs::JobRecord& job,
                                  const std::function<bool(const jobs::ProgressUpdate&)>& report) override;
  // Vector-Jacobian products of the last finished run (metrics).
  int64_t last_vjp_count() const { return last_vjp_count_; }

 private:
  registry::ModelCatalog* catalog_;
  registry::ModelCache* cache_;
  Options options_;
  std::atomic<int64_t> last_vjp_count_{0};
};

}  // namespace posbias::runners
