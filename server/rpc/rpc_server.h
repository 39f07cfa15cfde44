// The gRPC side of the server as one object the app composes: the call executor, call admission,
// the streams' reactors, each service's generated wiring, health, reflection, and the listening
// socket with its TLS. The header holds no gRPC type, so the app room stays gRPC-free.
//
// Lifecycle: constructed -> Start (listening; health SERVING) -> StopServing (health NOT_SERVING)
// -> Drain (open streams end, no new calls, in-flight calls get until the deadline, then the
// executor stops) -> destroyed. Each step is called once, from one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/api/api.h"
#include "server/auth/authenticator.h"
#include "server/jobs/job_store.h"
#include "server/limits/limits.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"

namespace posbias::rpc {

// gRPC's version, for the start-up line and the build-info metric.
std::string GrpcVersion();

class RpcServer {
 public:
  struct Options {
    std::string listen_address = "127.0.0.1:50051";  // host:port; port 0 picks a free port.
    int max_message_bytes = limits::Default<int>(limits::Limit::kMaxMessageBytes);
    int max_rpc_threads = limits::Default<int>(limits::Limit::kRpcThreads);
    int64_t max_waiting_calls = limits::Default<int64_t>(limits::Limit::kMaxWaitingCalls);
    int64_t max_watch_streams = limits::Default<int64_t>(limits::Limit::kMaxWatchStreams);
    int64_t max_upload_bytes = limits::Default<int64_t>(limits::Limit::kMaxUploadBytes);
    int64_t min_free_disk_bytes = limits::Default<int64_t>(limits::Limit::kMinFreeDiskMib) << 20;
    int upload_idle_seconds = limits::Default<int>(limits::Limit::kUploadIdleSeconds);
    int export_idle_seconds = limits::Default<int>(limits::Limit::kExportIdleSeconds);
    int max_exports_per_principal = limits::Default<int>(limits::Limit::kMaxExportsPerPrincipal);
    double tenant_share = limits::Default<double>(limits::Limit::kTenantShare);  // Of threads and watches.
    bool reflection = true;
    // TLS from PEM files, re-read when they change on disk (every reload_interval_seconds); no
    // certificate: plaintext. A client CA: mTLS (client certificates required and verified).
    std::string tls_cert_file, tls_key_file, tls_client_ca_file;
    int reload_interval_seconds = 1;
  };
  // What the services answer from: the api's states (serves = false: health and reflection only,
  // a worker replica).
  struct Api {
    bool serves = true;
    api::DensityRequests* density = nullptr;
    api::ModelRequests* models = nullptr;
    api::JobRequests* jobs = nullptr;
    registry::ModelCatalog* catalog = nullptr;
    jobs::JobStore* store = nullptr;
  };

  RpcServer(Options options, metrics::Metrics* metrics);
  ~RpcServer();
  RpcServer(const RpcServer&) = delete;
  RpcServer& operator=(const RpcServer&) = delete;

  // Listens: every call is admitted by `authenticator` under the methods' policies (api_methods.h).
  absl::Status Start(const Api& api, const auth::Authenticator* authenticator, const api::ApiMethods* methods);
  int port() const;
  // After a reload of the principals: open streams whose principal was revoked or demoted end.
  void Recheck();
  // Health says NOT_SERVING (load balancers stop sending); calls are still answered.
  void StopServing();
  // Open watches and uploads end; no new calls; in-flight ones get until now + `drain`, then are
  // cancelled; the executor stops once every call's work has finished.
  void Drain(std::chrono::milliseconds drain);
  // Blocks until the server has shut down.
  void Wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace posbias::rpc
