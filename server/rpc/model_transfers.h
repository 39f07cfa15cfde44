// The streams of the model service on gRPC's callback API, holding no thread while they wait.
// Their logic is model_streams.h's gRPC-free sessions; these reactors only move messages:
// UploadModel (a read reactor: each message handed to its UploadSession as it arrives, the
// registration itself run on the call executor) and ExportModel (a write reactor: the weights
// are prepared on the executor, then streamed a chunk at a time as the client takes them). An
// upload that sends nothing for the idle timeout is ended (DEADLINE_EXCEEDED); a cancelled,
// refused or failed upload leaves no staging file and registers nothing. An export holds a
// scratch copy of the weights while it streams: one tenant's principals together (a principal of
// no tenant: alone) have at most max_exports_per_principal open (RESOURCE_EXHAUSTED /
// QUOTA_EXCEEDED beyond), a copy is written
// only when it leaves --min-free-disk-mib free, and an export whose client takes nothing for its
// idle timeout is cancelled (the copy removed).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "posbias/v1/model_service.pb.h"
#include "server/limits/limits.h"
#include "server/threads/periodic_task.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/call_executor.h"
#include "server/api/api.h"
#include "server/rpc/open_streams.h"

namespace posbias::rpc {

class ModelTransfers {
 public:
  struct Options {
    api::UploadLimits limits;  // Size and free disk (model_streams.h).
    // Between messages.
    std::chrono::milliseconds upload_idle_timeout{
        std::chrono::seconds(limits::Default<int64_t>(limits::Limit::kUploadIdleSeconds))};
    // An export whose client takes no message this long is ended (its scratch copy removed).
    std::chrono::milliseconds export_idle_timeout{
        std::chrono::seconds(limits::Default<int64_t>(limits::Limit::kExportIdleSeconds))};
    // ExportModel streams one principal may have open at once (each holds a scratch copy).
    int max_exports_per_principal = limits::Default<int>(limits::Limit::kMaxExportsPerPrincipal);
  };
  ModelTransfers(registry::ModelCatalog* catalog, metrics::Metrics* metrics, Options options);
  ~ModelTransfers();
  // Where registrations and exports run (set before the server starts); starts the idle watchdog.
  void Start(CallExecutor* executor, const CallAuth* auth);
  // Ends open uploads (UNAVAILABLE / SHUTTING_DOWN); joins the watchdog.
  void Stop();
  // Open exports of the principal `name` (not yet ended).
  int64_t OpenExportsOf(const std::string& holder);  // Open exports counted against a tenant or principal.
  // After the tokens file was reloaded: ends every open upload and export whose principal was
  // revoked (UNAUTHENTICATED) or lost its role or tenant (PERMISSION_DENIED).
  void Recheck();

  // The two streams, named after their RPCs (the generated ModelServiceWiring forwards to them).
  grpc::ServerReadReactor<v1::UploadModelRequest>* UploadModel(grpc::CallbackServerContext* context,
                                                               v1::Model* response);
  grpc::ServerWriteReactor<v1::ExportModelResponse>* ExportModel(grpc::CallbackServerContext* context,
                                                                 const v1::ExportModelRequest* request);

 private:
  class UploadReactor;
  class ExportReactor;
  void Forget(UploadReactor* upload);

  registry::ModelCatalog* catalog_;
  metrics::Metrics* metrics_;
  Options options_;
  CallExecutor* executor_ = nullptr;
  const CallAuth* auth_ = nullptr;
  OpenStreams<UploadReactor> uploads_;
  OpenStreams<ExportReactor> exports_;
  std::mutex exports_admission_;  // One export admitted at a time: the per-principal count is exact.
  threads::PeriodicTask watchdog_;  // Ends idle uploads and exports, once a second.
};

}  // namespace posbias::rpc
