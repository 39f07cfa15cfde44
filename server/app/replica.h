// A posbias replica: one server process's rooms composed from its options (the job store, the
// model catalog and cache, the workers, the housekeeper, the api room's request state, the RPC
// server of rpc/rpc_server.h that serves the v1 services, health and reflection), the security
// flags' policy and the tokens file's reload.
//
// Lifecycle: constructed -> Start() (listening; health SERVING) -> Shutdown(drain) (health
// NOT_SERVING, no new calls, in-flight calls get until the drain deadline, then are cancelled) ->
// destroyed. Start and Shutdown are each called once, from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "server/admission/job_admission.h"
#include "server/threads/periodic_task.h"
#include "server/jobs/housekeeper.h"
#include "server/jobs/job_store.h"
#include "server/jobs/worker_pool.h"
#include "server/limits/limits.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"
#include "server/runners/runtime.h"
#include "server/auth/authenticator.h"
#include "server/api/api.h"
#include "server/rpc/rpc_server.h"

namespace posbias::app {

// What a replica does, its role in a deployment (the flag --role; not auth::Role, a principal's
// permission). kBoth: the embedded default (API and workers in one process). With a shared job
// store (PostgreSQL) the roles scale apart: kApi serves the v1 services and runs no jobs; kWorker
// runs jobs and serves only gRPC health (and reflection) for its probes.
enum class ReplicaRole { kApi, kWorker, kBoth };
absl::StatusOr<ReplicaRole> ParseReplicaRole(const std::string& name);
std::string ReplicaRoleName(ReplicaRole role);

class Replica {
 public:
  struct Options {
    ReplicaRole role = ReplicaRole::kBoth;  // --role
    // "" = SQLite at <data_dir>/jobs.sqlite; "sqlite:PATH"; or a PostgreSQL URI (shared store).
    std::string job_store;
    int64_t lease_ms = 30'000;         // Shared store: how long a claim holds a job unrenewed.
    int64_t part_samples = 0;          // Shared store: split jobs into parts of this many samples.
    int max_lost_attempts = limits::Default<int>(limits::Limit::kMaxLostAttempts);  // Then ATTEMPTS_EXHAUSTED.
    std::string worker_name;           // Prefix of this process's worker names ("" = host-pid).
    std::string listen_address = "127.0.0.1:50051";  // host:port; port 0 picks a free port.
    api::DensityLimits density_limits;
    // The limits' defaults come from the limits table (limits/limits.h), as the flags do.
    int max_message_bytes = limits::Default<int>(limits::Limit::kMaxMessageBytes);  // Request or response.
    int max_rpc_threads = limits::Default<int>(limits::Limit::kRpcThreads);  // The call executor's threads.
    int64_t max_waiting_calls = limits::Default<int64_t>(limits::Limit::kMaxWaitingCalls);  // Then SERVER_BUSY.
    int64_t max_watch_streams = limits::Default<int64_t>(limits::Limit::kMaxWatchStreams);  // Then SERVER_BUSY.
    int upload_idle_seconds = limits::Default<int>(limits::Limit::kUploadIdleSeconds);  // Silent uploads end.
    int export_idle_seconds = limits::Default<int>(limits::Limit::kExportIdleSeconds);  // Unread exports end.
    int max_exports_per_principal = limits::Default<int>(limits::Limit::kMaxExportsPerPrincipal);  // Open at once.
    // Fraction of the job queue, the WatchJob streams and the RPC threads one tenant may hold.
    double tenant_share = limits::Default<double>(limits::Limit::kTenantShare);
    std::string data_dir = "posbias-data";  // jobs.sqlite, models.json, uploads/.
    std::string model_root;            // Checkpoints and TorchScript files ("" = none allowed).
    bool allow_torchscript = false;    // Register and load TorchScript files (they run code).
    int cpu_threads = 0;               // LibTorch threads of the CPU worker (0 = all cores).
    bool cpu_worker = true;            // Run jobs on the CPU (besides any CUDA devices).
    int64_t cache_budget_bytes = limits::Default<int64_t>(limits::Limit::kModelCacheMb) << 20;
    int64_t max_upload_bytes = limits::Default<int64_t>(limits::Limit::kMaxUploadBytes);  // UploadModel stream.
    // Uploads leave this much of the data disk free.
    int64_t min_free_disk_bytes = limits::Default<int64_t>(limits::Limit::kMinFreeDiskMib) << 20;
    double retention_hours = limits::Default<double>(limits::Limit::kRetentionHours);  // Then deleted.
    admission::JobLimits job_limits;
    // Who may call (docs/operations/security.md). TLS with a certificate and key; mTLS with a client CA too;
    // principals from the tokens file. Listening off loopback with neither tokens nor mTLS is
    // refused unless allow_unauthenticated (a mesh in front authenticates).
    struct Security {
      std::string tls_cert_file, tls_key_file;  // PEM, both or neither.
      std::string tls_client_ca_file;           // PEM: require and verify client certificates.
      std::string auth_tokens_file;             // auth/principals.h; "" = no token principals.
      bool allow_unauthenticated = false;
      // Off loopback, a tokens file without TLS is refused (tokens would cross the network in
      // the clear) unless this is set: a mesh in front encrypts.
      bool allow_plaintext_tokens = false;
      int reload_interval_seconds = 1;          // Certificates and tokens re-read when changed.
    } security;
    bool reflection = true;  // gRPC server reflection (the API's schema, no data).
  };

  Replica(Options options, metrics::Metrics* metrics);
  ~Replica();

  // Opens the store (recovering jobs of a previous run) and the registry, starts the workers and
  // the RPC server.
  absl::Status Start();
  // The port actually bound (useful with port 0).
  int port() const { return rpc_ ? rpc_->port() : 0; }
  // Stops accepting calls and waits up to `drain` for in-flight calls before cancelling them.
  void Shutdown(std::chrono::milliseconds drain);
  void Wait();
  // Re-reads the tokens file now (SIGHUP); certificates are re-read when they change on disk.
  void ReloadCredentials();

 private:
  Options options_;
  metrics::Metrics* metrics_;
  // Each service's handlers' state (the api room); the gRPC side is rpc_.
  api::DensityRequests density_requests_;
  // Opens the job store and checks it fits the role.
  absl::Status OpenStore();
  // The workers and their metrics (role api: none run).
  void StartWorkers(bool runs_jobs);
  // Starts the gRPC side (rpc/rpc_server.h) on the api's states.
  absl::Status StartRpcServer(bool serves_api);
  // Checks the security options (TLS files, what may listen off loopback) and opens the
  // authenticator.
  absl::Status PrepareSecurity();
  void ReloadIfChanged();  // One look at the tokens file (reload_): re-read when it changed.
  void RecheckOpenStreams();  // After a reload: open streams whose principal was revoked or demoted end.

  std::unique_ptr<jobs::JobStore> store_;
  std::unique_ptr<runners::Runtime> runtime_;  // Torch-side: the model cache and the runner.
  std::unique_ptr<registry::ModelCatalog> catalog_;
  std::unique_ptr<jobs::WorkerPool> pool_;
  std::unique_ptr<jobs::Housekeeper> housekeeper_;
  std::unique_ptr<api::ModelRequests> model_requests_;
  std::unique_ptr<api::JobRequests> job_requests_;
  std::unique_ptr<auth::Authenticator> authenticator_;
  std::unique_ptr<rpc::RpcServer> rpc_;
  threads::PeriodicTask reload_;  // ReloadIfChanged every reload_interval_seconds.
  bool shut_down_ = false;
};

}  // namespace posbias::app
