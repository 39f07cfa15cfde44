// posbias-server: flags (or environment variables) -> options -> start -> wait for SIGTERM/SIGINT
// -> drain -> exit 0. Shutdown always ends: a drain that overruns --drain-seconds by more than
// kShutdownOverrun (a call that does not stop, a job chunk that does not end) exits with status 1
// at that moment; running jobs return to the queue when their lease lapses, as for a lost worker.
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include <google/protobuf/stubs/common.h>

#include "CLI/CLI.hpp"
#include "server/limits/limits.h"
#include "server/logging/logging.h"
#include "server/metrics/metrics.h"
#include "server/runners/runtime.h"
#include "server/app/replica.h"
#include "spdlog/spdlog.h"

#ifndef POSBIAS_VERSION
#define POSBIAS_VERSION "0.0.0"
#endif

namespace {

// How long past --drain-seconds a shutdown may run before the process exits anyway.
constexpr std::chrono::seconds kShutdownOverrun{5};

// Ends the process once `limit` has passed, unless it ended first: the bound on shutdown.
void ExitIfShutdownOverruns(std::chrono::seconds limit) {
  std::thread([limit] {
    std::this_thread::sleep_for(limit);
    spdlog::error("shutdown overran its {} s bound (--drain-seconds plus {} s); exiting now: running jobs return "
                  "to the queue when their leases lapse", limit.count(), kShutdownOverrun.count());
    spdlog::shutdown();
    std::_Exit(1);
  }).detach();
}

struct Flags {
  posbias::app::Replica::Options server;
  std::string role = "both";
  int lease_seconds = 30;
  std::string metrics_listen = "127.0.0.1:9464";
  std::string log_level = "info";
  std::string log_format = "text";
  int drain_seconds = 10;
  int64_t model_cache_mb = 0;     // Limits: set from the table by AddLimitFlag.
  int64_t min_free_disk_mib = 0;
  bool no_reflection = false;
};

using posbias::limits::Limit;

// A configurable limit's flag, from the limits table: name, environment variable, help with the
// unit, the default and the range an operator may set.
template <typename T>
void AddLimitFlag(CLI::App& app, Limit id, T& target) {
  const auto& limit = posbias::limits::Spec(id);
  target = posbias::limits::Default<T>(id);
  app.add_option(std::string(limit.flag), target, std::string(limit.help) + ", " + std::string(limit.unit))
      ->envname(posbias::limits::EnvironmentVariable(limit))
      ->check(CLI::Range(static_cast<T>(limit.lowest), static_cast<T>(limit.highest)))
      ->capture_default_str();
}

// Every configurable limit of the table has its flag (a row added without one fails at start).
bool EveryLimitHasAFlag(CLI::App& app) {
  for (const auto& limit : posbias::limits::kLimits) {
    if (!limit.fixed() && app.get_option_no_throw(std::string(limit.flag)) == nullptr) {
      std::fprintf(stderr, "posbias-server: the limit %s has no flag %s\n", std::string(limit.name).c_str(),
                   std::string(limit.flag).c_str());
      return false;
    }
  }
  return true;
}

void DefineFlags(CLI::App& app, Flags& flags) {
  auto& limits = flags.server.density_limits;
  app.add_option("--listen", flags.server.listen_address, "gRPC listen address HOST:PORT (port 0: any)")
      ->envname("POSBIAS_LISTEN")->capture_default_str();
  app.add_option("--metrics-listen", flags.metrics_listen, "Prometheus /metrics address HOST:PORT")
      ->envname("POSBIAS_METRICS_LISTEN")->capture_default_str();
  app.add_option("--log-level", flags.log_level, "trace|debug|info|warn|error|critical|off")
      ->envname("POSBIAS_LOG_LEVEL")->capture_default_str();
  app.add_option("--log-format", flags.log_format, "text or json (JSON lines)")
      ->envname("POSBIAS_LOG_FORMAT")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  app.add_option("--drain-seconds", flags.drain_seconds,
                 "Grace period for in-flight calls on shutdown; the process exits at most 5 s after it")
      ->envname("POSBIAS_DRAIN_SECONDS")->check(CLI::Range(0, 3600))->capture_default_str();
  AddLimitFlag(app, Limit::kMaxPoints, limits.max_points);
  AddLimitFlag(app, Limit::kMaxDiscreteLength, limits.max_discrete_length);
  AddLimitFlag(app, Limit::kMaxDiscreteWork, limits.max_discrete_work);
  AddLimitFlag(app, Limit::kMaxReturnedPositions, limits.max_returned_positions);
  AddLimitFlag(app, Limit::kMaxMessageBytes, flags.server.max_message_bytes);
  AddLimitFlag(app, Limit::kRpcThreads, flags.server.max_rpc_threads);
  AddLimitFlag(app, Limit::kMaxWaitingCalls, flags.server.max_waiting_calls);
  AddLimitFlag(app, Limit::kMaxWatchStreams, flags.server.max_watch_streams);
  AddLimitFlag(app, Limit::kUploadIdleSeconds, flags.server.upload_idle_seconds);
  AddLimitFlag(app, Limit::kExportIdleSeconds, flags.server.export_idle_seconds);
  AddLimitFlag(app, Limit::kMaxExportsPerPrincipal, flags.server.max_exports_per_principal);
  AddLimitFlag(app, Limit::kTenantShare, flags.server.tenant_share);
  auto& jobs = flags.server.job_limits;
  app.add_option("--role", flags.role, "api (serve the API, run no jobs), worker (run jobs; health only) or both")
      ->envname("POSBIAS_ROLE")->check(CLI::IsMember({"api", "worker", "both"}))->capture_default_str();
  app.add_option("--job-store", flags.server.job_store,
                 "Job store: empty = SQLite in --data-dir; sqlite:PATH; or postgresql://USER@HOST:PORT/DB (shared by replicas)")
      ->envname("POSBIAS_JOB_STORE");
  app.add_option("--lease-seconds", flags.lease_seconds, "Shared store: how long a worker holds a job without a heartbeat")
      ->envname("POSBIAS_LEASE_SECONDS")->check(CLI::Range(2, 3600))->capture_default_str();
  app.add_option("--part-samples", flags.server.part_samples,
                 "Shared store: split jobs with more samples into parts of this many, run by any workers in parallel (0: never)")
      ->envname("POSBIAS_PART_SAMPLES")->check(CLI::Range(int64_t{0}, int64_t{1} << 20))->capture_default_str();
  app.add_option("--worker-name", flags.server.worker_name, "Name of this process's workers in the shared store (default: host-pid)")
      ->envname("POSBIAS_WORKER_NAME");
  app.add_option("--data-dir", flags.server.data_dir, "Job store (jobs.sqlite), registered models and uploads")
      ->envname("POSBIAS_DATA_DIR")->capture_default_str();
  app.add_option("--model-root", flags.server.model_root, "Checkpoints and TorchScript files may be registered from here")
      ->envname("POSBIAS_MODEL_ROOT");
  auto& security = flags.server.security;
  app.add_option("--tls-cert-file", security.tls_cert_file, "PEM certificate chain: TLS on the gRPC port")
      ->envname("POSBIAS_TLS_CERT_FILE")->group("Security");
  app.add_option("--tls-key-file", security.tls_key_file, "PEM private key of --tls-cert-file")
      ->envname("POSBIAS_TLS_KEY_FILE")->group("Security");
  app.add_option("--tls-client-ca-file", security.tls_client_ca_file,
                 "PEM CA bundle: require and verify client certificates (mTLS)")
      ->envname("POSBIAS_TLS_CLIENT_CA_FILE")->group("Security");
  app.add_option("--auth-tokens-file", security.auth_tokens_file,
                 "JSON principals (tenant, roles, SHA-256 of each bearer token); re-read on SIGHUP and on change")
      ->envname("POSBIAS_AUTH_TOKENS_FILE")->group("Security");
  app.add_flag("--allow-unauthenticated", security.allow_unauthenticated,
               "Listen off loopback without tokens or mTLS (only behind a mesh that authenticates)")
      ->envname("POSBIAS_ALLOW_UNAUTHENTICATED")->group("Security");
  app.add_flag("--allow-plaintext-tokens", security.allow_plaintext_tokens,
               "Accept bearer tokens without TLS off loopback (only behind a mesh that encrypts)")
      ->envname("POSBIAS_ALLOW_PLAINTEXT_TOKENS")->group("Security");
  app.add_flag("--no-reflection", flags.no_reflection, "Do not serve gRPC server reflection")
      ->envname("POSBIAS_NO_REFLECTION")->group("Security");
  app.add_flag("--allow-torchscript", flags.server.allow_torchscript,
               "Allow registering and loading TorchScript files (loading one runs code from the file)")
      ->envname("POSBIAS_ALLOW_TORCHSCRIPT");
  app.add_option("--cpu-threads", flags.server.cpu_threads, "LibTorch threads of the CPU worker (0: all cores)")
      ->envname("POSBIAS_CPU_THREADS")->check(CLI::Range(0, 1024))->capture_default_str();
  app.add_flag("!--no-cpu-worker", flags.server.cpu_worker, "Run jobs on CUDA devices only")->envname("POSBIAS_CPU_WORKER");
  AddLimitFlag(app, Limit::kMaxQueued, jobs.max_queued);
  AddLimitFlag(app, Limit::kMaxSequenceLength, jobs.max_sequence_length);
  AddLimitFlag(app, Limit::kJobTimeLimit, jobs.default_time_limit_seconds);
  AddLimitFlag(app, Limit::kMaxJobTimeLimit, jobs.max_time_limit_seconds);
  AddLimitFlag(app, Limit::kMaxLostAttempts, flags.server.max_lost_attempts);
  AddLimitFlag(app, Limit::kMaxRawValues, jobs.max_raw_values);
  AddLimitFlag(app, Limit::kMaxUploadBytes, flags.server.max_upload_bytes);
  AddLimitFlag(app, Limit::kMinFreeDiskMib, flags.min_free_disk_mib);
  AddLimitFlag(app, Limit::kRetentionHours, flags.server.retention_hours);
  AddLimitFlag(app, Limit::kModelCacheMb, flags.model_cache_mb);
}

// Splits "host:port" (IPv6 as "[::1]:port") into its parts; false when malformed.
bool SplitHostPort(const std::string& address, std::string* host, int* port) {
  const auto colon = address.rfind(':');
  if (colon == std::string::npos || colon == 0) return false;
  *host = address.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']') *host = host->substr(1, host->size() - 2);
  try {
    size_t used = 0;
    *port = std::stoi(address.substr(colon + 1), &used);
    return used == address.size() - colon - 1 && *port >= 0 && *port <= 65535;
  } catch (const std::exception&) {
    return false;
  }
}

void LogBanner(const Flags& flags, int grpc_port, int metrics_port) {
  const auto& limits = flags.server.density_limits;
  spdlog::info("posbias-server {} (gRPC {}, protobuf {})", POSBIAS_VERSION, posbias::rpc::GrpcVersion(),
               google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION));
  spdlog::info("config: listen={} metrics_listen={} log_level={} log_format={} drain_seconds={} "
               "rpc_threads={} max_message_bytes={} max_points={} max_discrete_length={} "
               "max_discrete_work={} max_returned_positions={}",
               flags.server.listen_address, flags.metrics_listen, flags.log_level, flags.log_format,
               flags.drain_seconds, flags.server.max_rpc_threads, flags.server.max_message_bytes,
               limits.max_points, limits.max_discrete_length, limits.max_discrete_work,
               limits.max_returned_positions);
  const auto& security = flags.server.security;
  spdlog::info("security: tls={} mtls={} tokens_file={} allow_unauthenticated={} reflection={}",
               !security.tls_cert_file.empty(), !security.tls_client_ca_file.empty(),
               security.auth_tokens_file.empty() ? "-" : security.auth_tokens_file, security.allow_unauthenticated,
               flags.server.reflection);
  // The job store's connection string may hold a password: only its kind is logged.
  const std::string& store = flags.server.job_store;
  spdlog::info("config: role={} job_store={} lease_seconds={} part_samples={} worker_name={}", flags.role,
               store.empty() ? "sqlite (data_dir)" : store.rfind("sqlite:", 0) == 0 ? store : "postgresql",
               flags.lease_seconds, flags.server.part_samples,
               flags.server.worker_name.empty() ? "(host-pid)" : flags.server.worker_name);
  spdlog::info("config: data_dir={} model_root={} cpu_threads={} cpu_worker={} max_queued={} "
               "max_sequence_length={} retention_hours={} model_cache_mb={}",
               flags.server.data_dir, flags.server.model_root.empty() ? "(none)" : flags.server.model_root,
               flags.server.cpu_threads, flags.server.cpu_worker, flags.server.job_limits.max_queued,
               flags.server.job_limits.max_sequence_length, flags.server.retention_hours, flags.model_cache_mb);
  spdlog::info("listening for gRPC on port {} ({}); metrics on http://{}/metrics (port {})", grpc_port,
               flags.server.listen_address, flags.metrics_listen, metrics_port);
}

int WaitForTerminationSignal(const sigset_t& signals) {
  int signal_number = 0;
  sigwait(&signals, &signal_number);
  return signal_number;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"posbias-server: transformer position-bias theory and measurement over gRPC"};
  app.set_version_flag("--version", std::string("posbias-server ") + POSBIAS_VERSION);
  Flags flags;
  DefineFlags(app, flags);
  if (!EveryLimitHasAFlag(app)) return 70;
  CLI11_PARSE(app, argc, argv);
  flags.server.cache_budget_bytes = flags.model_cache_mb << 20;
  flags.server.min_free_disk_bytes = flags.min_free_disk_mib << 20;
  flags.server.reflection = !flags.no_reflection;
  flags.server.role = *posbias::app::ParseReplicaRole(flags.role);  // Checked by IsMember above.
  flags.server.lease_ms = int64_t{flags.lease_seconds} * 1000;
  posbias::runners::PrepareProcessForMeasurements();  // Measure returns it when it ends.
  if (auto status = posbias::logging::ConfigureLogging(flags.log_level, flags.log_format); !status.ok()) {
    std::fprintf(stderr, "posbias-server: %s\n", std::string(status.message()).c_str());
    return 2;
  }
  std::string metrics_host;
  int metrics_port = 0;
  if (!SplitHostPort(flags.metrics_listen, &metrics_host, &metrics_port)) {
    spdlog::error("--metrics-listen = {} is invalid: allowed HOST:PORT", flags.metrics_listen);
    return 2;
  }
  // Block the termination signals before any thread starts, so only sigwait below sees them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  posbias::metrics::Metrics metrics({POSBIAS_VERSION, posbias::rpc::GrpcVersion(),
                                     google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION)});
  posbias::metrics::MetricsHttpServer metrics_server(&metrics, metrics_host, metrics_port);
  if (auto status = metrics_server.Start(); !status.ok()) {
    spdlog::error("{}", std::string(status.message()));
    return 1;
  }
  posbias::app::Replica server(flags.server, &metrics);
  if (auto status = server.Start(); !status.ok()) {
    spdlog::error("{}", std::string(status.message()));
    return 1;
  }
  LogBanner(flags, server.port(), metrics_server.port());
  int signal_number = WaitForTerminationSignal(signals);
  while (signal_number == SIGHUP) {  // Reload the tokens file; keep serving.
    server.ReloadCredentials();
    signal_number = WaitForTerminationSignal(signals);
  }
  spdlog::info("received signal {}; draining in-flight calls for up to {} s", signal_number,
               flags.drain_seconds);
  ExitIfShutdownOverruns(std::chrono::seconds(flags.drain_seconds) + kShutdownOverrun);
  server.Shutdown(std::chrono::seconds(flags.drain_seconds));
  metrics_server.Stop();
  spdlog::info("stopped cleanly");
  return 0;
}
