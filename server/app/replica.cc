#include "server/app/replica.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/paging/page_token.h"
#include "server/status/error.h"
#include "spdlog/spdlog.h"

namespace posbias::app {

namespace {

// The store's name for `model`'s registration: its jobs are those bound to it (by uid, or by name
// and namespace for jobs stored before uids; job_store.h, ListFilter::bound_to).
jobs::ModelBinding BindingOf(const registry::ModelEntry& model) {
  return jobs::ModelBinding{model.name, registry::ModelPath(model), model.uid, model.tenant};
}

}  // namespace

absl::StatusOr<ReplicaRole> ParseReplicaRole(const std::string& name) {
  if (name == "api") return ReplicaRole::kApi;
  if (name == "worker") return ReplicaRole::kWorker;
  if (name == "both") return ReplicaRole::kBoth;
  return absl::InvalidArgumentError(absl::StrCat("role '", name, "' is not one of: api, worker, both"));
}

std::string ReplicaRoleName(ReplicaRole role) {
  switch (role) {
    case ReplicaRole::kApi: return "api";
    case ReplicaRole::kWorker: return "worker";
    case ReplicaRole::kBoth: return "both";
  }
  return "both";
}

namespace {
std::string DefaultWorkerName() {
  char host[256] = {0};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') std::snprintf(host, sizeof(host), "posbias");
  return absl::StrCat(host, "-", getpid());
}
}  // namespace

Replica::Replica(Options options, metrics::Metrics* metrics)
    : options_(std::move(options)), metrics_(metrics), density_requests_{options_.density_limits, metrics_} {}

Replica::~Replica() {
  if (rpc_ && !shut_down_) Shutdown(std::chrono::milliseconds(0));
}

absl::Status Replica::OpenStore() {
  std::error_code error;
  std::filesystem::create_directories(options_.data_dir, error);
  // Page tokens are signed with the data directory's key, so replicas sharing it accept each
  // other's tokens.
  auto key = paging::LoadOrCreatePageTokenKey((std::filesystem::path(options_.data_dir) / "page_token.key").string());
  if (!key.ok()) return key.status();
  paging::SetPageTokenKey(*std::move(key));
  auto store = jobs::OpenJobStore(options_.job_store, (std::filesystem::path(options_.data_dir) / "jobs.sqlite").string(),
                                  options_.lease_ms, options_.part_samples, options_.max_lost_attempts);
  if (!store.ok()) return store.status();
  store_ = std::move(*store);
  if (store_->lease_ms() == 0 && options_.role != ReplicaRole::kBoth) {
    return absl::InvalidArgumentError(
        absl::StrCat("role ", ReplicaRoleName(options_.role), " needs a shared job store (--job-store postgresql://...): "
                     "the embedded SQLite store serves one process, which must be role both"));
  }
  auto recovered = store_->RecoverAfterRestart();
  if (recovered.ok() && *recovered > 0) spdlog::info("re-queued {} jobs interrupted by the previous run", *recovered);
  return absl::OkStatus();
}

void Replica::StartWorkers(bool runs_jobs) {
  jobs::WorkerPool::Options pool_options;
  // With a shared store a worker's name says which process holds a job ("host-pid/cpu-0").
  const std::string prefix = store_->lease_ms() > 0 ? absl::StrCat(options_.worker_name, "/") : "";
  if (runs_jobs) pool_options.workers = runners::WorkerDevices(prefix, options_.cpu_worker);
  // Shared store: idle workers wake on NOTIFY; the poll only backs up a lost notification.
  if (store_->lease_ms() > 0) pool_options.idle_poll_ms = 5000;
  jobs::WorkerObserver observer;
  if (metrics_ != nullptr) {
    observer.started = [this](double wait) { metrics_->JobStarted(wait); };
    observer.finished = [this](const jobs::JobRecord&, const std::string& outcome, double seconds) {
      metrics_->JobFinished(outcome, seconds, static_cast<double>(runtime_->last_vjp_count()));
    };
    metrics_->SetQueueDepthSource([this] {
      std::map<std::string, int64_t> depth;
      for (auto state : {jobs::JobState::kQueued, jobs::JobState::kRunning, jobs::JobState::kCancelling,
                         jobs::JobState::kSucceeded, jobs::JobState::kFailed, jobs::JobState::kCancelled}) {
        depth[jobs::JobStateName(state)] = 0;
      }
      if (auto counts = store_->CountByState(); counts.ok()) {
        for (const auto& [state, count] : *counts) depth[jobs::JobStateName(state)] = count;
      }
      return depth;
    });
  }
  pool_ = std::make_unique<jobs::WorkerPool>(store_.get(), runtime_->runner(catalog_.get()), pool_options, observer);
}

namespace {

// Whether clients can reach `address` only from this machine (loopback, a unix socket).
bool IsLoopbackAddress(const std::string& address) {
  if (address.rfind("unix:", 0) == 0) return true;
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? address : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  return host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// FAILED_PRECONDITION naming the flag when `path` is not a readable PEM file.
absl::Status CheckPemFile(const std::string& flag, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::string head(4096, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(std::max<std::streamsize>(0, in.gcount())));
  if (!in && head.empty()) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotFound,
                           absl::StrCat(flag, " = ", path, " cannot be read"));
  }
  if (head.find("-----BEGIN ") == std::string::npos) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           absl::StrCat(flag, " = ", path, " is not a PEM file (no -----BEGIN line)"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Replica::PrepareSecurity() {
  const auto& security = options_.security;
  const bool tls = !security.tls_cert_file.empty() || !security.tls_key_file.empty();
  if (tls && (security.tls_cert_file.empty() || security.tls_key_file.empty())) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           "--tls-cert-file and --tls-key-file go together: give both for TLS, or neither");
  }
  if (!security.tls_client_ca_file.empty() && !tls) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           "--tls-client-ca-file (mTLS) needs TLS: give --tls-cert-file and --tls-key-file too");
  }
  for (const auto& [flag, path] : {std::pair<const char*, std::string>{"--tls-cert-file", security.tls_cert_file},
                                   {"--tls-key-file", security.tls_key_file},
                                   {"--tls-client-ca-file", security.tls_client_ca_file}}) {
    if (path.empty()) continue;
    if (auto status = CheckPemFile(flag, path); !status.ok()) return status;
  }
  const bool mtls = !security.tls_client_ca_file.empty();
  if (security.auth_tokens_file.empty() && !mtls && !security.allow_unauthenticated &&
      !IsLoopbackAddress(options_.listen_address)) {
    return ErrorWithReason(
        absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
        absl::StrCat("refusing to listen on ", options_.listen_address,
                     " without authentication: give --auth-tokens-file (bearer tokens) or --tls-client-ca-file (mTLS), "
                     "listen on 127.0.0.1, or pass --allow-unauthenticated when a mesh in front authenticates"));
  }
  if (!security.auth_tokens_file.empty() && !tls && !security.allow_plaintext_tokens &&
      !IsLoopbackAddress(options_.listen_address)) {
    return ErrorWithReason(
        absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
        absl::StrCat("refusing to accept bearer tokens in plaintext on ", options_.listen_address,
                     ": give --tls-cert-file and --tls-key-file, listen on 127.0.0.1, or pass --allow-plaintext-tokens "
                     "when a mesh in front encrypts"));
  }
  auto authenticator = auth::Authenticator::Open({security.auth_tokens_file, mtls});
  if (!authenticator.ok()) return authenticator.status();
  authenticator_ = *std::move(authenticator);
  return absl::OkStatus();
}

void Replica::ReloadCredentials() {
  if (!authenticator_) return;
  if (auto status = authenticator_->Reload(); !status.ok()) {
    spdlog::error("tokens file not reloaded (the principals loaded before stay): {}", std::string(status.message()));
  } else if (!options_.security.auth_tokens_file.empty()) {
    spdlog::info("tokens file reloaded: {} principals", authenticator_->principal_count());
  }
  RecheckOpenStreams();
}

void Replica::RecheckOpenStreams() {
  // Every open stream under the principals loaded now: revoked or demoted ones end at once.
  if (rpc_) rpc_->Recheck();
}

void Replica::ReloadIfChanged() {
  const size_t before = authenticator_->principal_count();
  if (auto status = authenticator_->ReloadIfChanged(); status.code() == absl::StatusCode::kNotFound) {
    spdlog::error("{}", std::string(status.message()));
  } else if (!status.ok()) {
    if (metrics_ != nullptr) metrics_->TokensReloadFailed();
    spdlog::error("tokens file changed but not reloaded (the principals loaded before stay): {}",
                  std::string(status.message()));
  } else if (authenticator_->principal_count() != before) {
    spdlog::info("tokens file changed: {} principals", authenticator_->principal_count());
  }
  RecheckOpenStreams();  // Cheap (a look-up per open stream), so after every poll, changed or not.
}

absl::Status Replica::StartRpcServer(bool serves_api) {
  const auto& methods = api::V1Methods();  // Every RPC's policy, from its proto option.
  if (!methods.ok()) {
    return absl::InternalError(absl::StrCat("the API's method policies are incomplete: ", methods.status().message()));
  }
  rpc::RpcServer::Options options;
  options.listen_address = options_.listen_address;
  options.max_message_bytes = options_.max_message_bytes;
  options.max_rpc_threads = options_.max_rpc_threads;
  options.max_waiting_calls = options_.max_waiting_calls;
  options.max_watch_streams = options_.max_watch_streams;
  options.max_upload_bytes = options_.max_upload_bytes;
  options.min_free_disk_bytes = options_.min_free_disk_bytes;
  options.upload_idle_seconds = options_.upload_idle_seconds;
  options.export_idle_seconds = options_.export_idle_seconds;
  options.max_exports_per_principal = options_.max_exports_per_principal;
  options.tenant_share = options_.tenant_share;
  options.reflection = options_.reflection;
  options.tls_cert_file = options_.security.tls_cert_file;
  options.tls_key_file = options_.security.tls_key_file;
  options.tls_client_ca_file = options_.security.tls_client_ca_file;
  options.reload_interval_seconds = options_.security.reload_interval_seconds;
  rpc_ = std::make_unique<rpc::RpcServer>(std::move(options), metrics_);
  rpc::RpcServer::Api served{serves_api, &density_requests_, model_requests_.get(), job_requests_.get(), catalog_.get(),
                              store_.get()};
  return rpc_->Start(served, authenticator_.get(), &*methods);
}

absl::Status Replica::Start() {
  if (auto status = OpenStore(); !status.ok()) return status;
  if (options_.worker_name.empty()) options_.worker_name = DefaultWorkerName();
  const bool runs_jobs = options_.role != ReplicaRole::kApi;
  const bool serves_api = options_.role != ReplicaRole::kWorker;
  jobs::Housekeeper::Options housekeeping;
  housekeeping.retention_hours = options_.retention_hours;
  housekeeping.on_reaped = [](int64_t reaped) { spdlog::warn("re-queued {} jobs whose worker lost its lease", reaped); };
  housekeeper_ = std::make_unique<jobs::Housekeeper>(store_.get(), housekeeping);
  housekeeper_->Round();  // Purges what passed its retention while the server was down.

  runners::Runtime::Options runtime_options;
  // An API-only process builds a model only to check a registration (and hash its weights) or to
  // export it: it keeps none, and the budget still bounds what it builds (model_cache.h).
  runtime_options.model_cache_bytes = options_.cache_budget_bytes;
  runtime_options.keep_models = runs_jobs;
  runtime_options.cpu_threads = options_.cpu_threads;
  if (metrics_ != nullptr) runtime_options.on_model_load = [this](double seconds) { metrics_->ModelLoaded(seconds); };
  runtime_ = runners::Runtime::Create(runtime_options);
  auto catalog = registry::ModelCatalog::Open(
      {options_.model_root, options_.data_dir, options_.allow_torchscript, options_.cache_budget_bytes},
      runtime_->loader());
  if (!catalog.ok()) return catalog.status();
  catalog_ = std::move(*catalog);
  if (const auto& left = catalog_->leftovers(); left.index_temporaries + left.scratch.files_removed > 0) {
    spdlog::info("removed what stopped processes left in {}: {} temporary index copies, {} scratch and orphaned "
                 "upload files ({} bytes)", options_.data_dir, left.index_temporaries, left.scratch.files_removed,
                 left.scratch.bytes_removed);
  }
  StartWorkers(runs_jobs);
  // With a shared store the workers are other processes: a CUDA (or float16, or larger-than-this-
  // host) job is accepted and waits until a worker with a CUDA device claims it.
  options_.job_limits.cuda_available = runners::CudaDeviceCount() > 0 || store_->lease_ms() > 0;
  options_.job_limits.tenant_share = options_.tenant_share;
  api::ModelRequests::Jobs model_jobs;
  model_jobs.active = [this](const registry::ModelEntry& model, const std::optional<std::string>& tenant) {
    jobs::ListFilter filter;
    filter.bound_to = BindingOf(model);
    filter.states = {jobs::JobState::kQueued, jobs::JobState::kRunning, jobs::JobState::kCancelling};
    filter.tenant = tenant;
    return store_->Count(filter);
  };
  model_jobs.cancel = [this](const registry::ModelEntry& model) { return jobs::CancelJobsBoundTo(*store_, BindingOf(model)); };
  model_requests_ = std::make_unique<api::ModelRequests>(catalog_.get(), std::move(model_jobs));
  // Text inputs are laid out with the registered models' tokenizers.
  job_requests_ = std::make_unique<api::JobRequests>(store_.get(), catalog_.get(), pool_.get(), options_.job_limits,
                                                metrics_, &model_requests_->tokenizers);
  // The security options are checked (and the tokens file read) before anything listens.
  if (auto status = PrepareSecurity(); !status.ok()) return status;
  if (auto status = StartRpcServer(serves_api); !status.ok()) {
    rpc_.reset();  // Never listened: nothing to drain (its streams stop as it is destroyed).
    return status;
  }
  if (!options_.security.auth_tokens_file.empty()) {
    reload_.Start({std::chrono::seconds(std::max(1, options_.security.reload_interval_seconds))},
                  [this] { ReloadIfChanged(); });
  }
  if (runs_jobs) pool_->Start();
  housekeeper_->Start();
  return absl::OkStatus();
}

void Replica::Shutdown(std::chrono::milliseconds drain) {
  if (!rpc_ || shut_down_) return;
  shut_down_ = true;
  reload_.Stop();
  housekeeper_->Stop();
  rpc_->StopServing();        // Health says NOT_SERVING.
  job_requests_->Shutdown();  // New submissions are refused.
  rpc_->Drain(drain);         // Open streams end; in-flight calls get until the deadline.
  pool_->Stop();              // Running jobs stop at their next chunk and go back to the queue.
}

void Replica::Wait() {
  if (rpc_) rpc_->Wait();
}

}  // namespace posbias::app
