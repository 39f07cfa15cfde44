#include "server/rpc/rpc_server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_credentials_options.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/call_executor.h"
#include "server/rpc/v1_wiring.h"
#include "server/rpc/job_watches.h"
#include "server/rpc/model_transfers.h"

namespace posbias::rpc {
namespace {

// The transport's credentials: plaintext, TLS, or mTLS, from files a provider re-reads when they
// change on disk (renewed certificates take effect without a restart or a dropped connection).
std::shared_ptr<grpc::ServerCredentials> Credentials(const RpcServer::Options& options) {
  if (options.tls_cert_file.empty()) return grpc::InsecureServerCredentials();
  const unsigned interval = static_cast<unsigned>(std::max(1, options.reload_interval_seconds));
  auto provider = std::make_shared<grpc::experimental::FileWatcherCertificateProvider>(
      options.tls_key_file, options.tls_cert_file, options.tls_client_ca_file, interval);
  grpc::experimental::TlsServerCredentialsOptions tls_options(provider);
  tls_options.watch_identity_key_cert_pairs();
  if (!options.tls_client_ca_file.empty()) {
    tls_options.watch_root_certs();
    tls_options.set_cert_request_type(GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  } else {
    tls_options.set_cert_request_type(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  }
  return grpc::experimental::TlsServerCredentials(tls_options);
}

}  // namespace

std::string GrpcVersion() { return grpc::Version(); }

struct RpcServer::Impl {
  Options options;
  metrics::Metrics* metrics;
  int port = 0;
  // What every call needs (executor, metrics, door); filled before the server starts.
  CallRuntime call_runtime;
  std::unique_ptr<CallExecutor> executor;
  std::unique_ptr<CallAuth> call_auth;
  std::unique_ptr<ModelTransfers> transfers;
  std::unique_ptr<JobWatches> watches;
  std::unique_ptr<V1Wiring<ModelTransfers, JobWatches>> services;
  std::unique_ptr<grpc::Server> server;

  // The listening options: message sizes, keepalive, one socket per address, the thread quota.
  void Configure(grpc::ServerBuilder& builder) {
    builder.AddListeningPort(options.listen_address, Credentials(options), &port);
    // One socket per address: with SO_REUSEPORT gRPC binds a second one, which for port 0 lands
    // on a different, unreported port.
    builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
    builder.SetMaxReceiveMessageSize(options.max_message_bytes);
    builder.SetMaxSendMessageSize(options.max_message_bytes);
    // Keepalive: the server pings a connection idle for a minute and drops it when no answer
    // comes in 20 s; a client may ping at most every 10 s (more often: the connection is closed).
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, 60'000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20'000);
    builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 10'000);
    builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_PERMIT_WITHOUT_CALLS, 1);
  }
};

RpcServer::RpcServer(Options options, metrics::Metrics* metrics) : impl_(std::make_unique<Impl>()) {
  impl_->options = std::move(options);
  impl_->metrics = metrics;
}

RpcServer::~RpcServer() = default;

absl::Status RpcServer::Start(const Api& api, const auth::Authenticator* authenticator, const api::ApiMethods* methods) {
  Impl& s = *impl_;
  s.executor = std::make_unique<CallExecutor>(
      CallExecutor::Options{s.options.max_rpc_threads, s.options.max_waiting_calls, s.options.tenant_share});
  s.call_auth = std::make_unique<CallAuth>(authenticator, methods, s.metrics);
  s.call_runtime = CallRuntime{s.executor.get(), s.metrics, s.call_auth.get()};
  grpc::EnableDefaultHealthCheckService(true);
  if (s.options.reflection) grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  s.Configure(builder);
  // The v1 services run on the callback API (their work on the call executor); the threads of
  // this quota serve only what is still synchronous (reflection).
  grpc::ResourceQuota quota("posbias");
  quota.SetMaxThreads(8);
  builder.SetResourceQuota(quota);
  if (api.serves) {
    ModelTransfers::Options transfers;
    transfers.limits.max_upload_bytes = static_cast<uint64_t>(s.options.max_upload_bytes);
    transfers.limits.min_free_disk_bytes = s.options.min_free_disk_bytes;
    transfers.upload_idle_timeout = std::chrono::seconds(s.options.upload_idle_seconds);
    transfers.export_idle_timeout = std::chrono::seconds(s.options.export_idle_seconds);
    transfers.max_exports_per_principal = s.options.max_exports_per_principal;
    s.transfers = std::make_unique<ModelTransfers>(api.catalog, s.metrics, transfers);
    JobWatches::Options watches;
    watches.max_streams = s.options.max_watch_streams;
    watches.tenant_share = s.options.tenant_share;
    s.watches = std::make_unique<JobWatches>(api.store, s.metrics, watches);
    s.services = std::make_unique<V1Wiring<ModelTransfers, JobWatches>>(api.density, api.models, s.transfers.get(),
                                                                         api.jobs, s.watches.get(), &s.call_runtime);
    s.transfers->Start(s.executor.get(), s.call_auth.get());
    s.watches->Start(s.call_auth.get(), api.jobs);
    s.services->RegisterWith(builder);
  }
  s.server = builder.BuildAndStart();
  if (!s.server || s.port == 0) {
    return absl::UnavailableError(absl::StrCat("cannot listen for gRPC on ", s.options.listen_address,
                                               " (address in use, or not a valid host:port)"));
  }
  auto* health = s.server->GetHealthCheckService();
  health->SetServingStatus("", true);
  if (api.serves) {
    for (const char* service : kV1ServiceNames) health->SetServingStatus(service, true);
  }
  return absl::OkStatus();
}

int RpcServer::port() const { return impl_->port; }

void RpcServer::Recheck() {
  if (impl_->watches) impl_->watches->Recheck();
  if (impl_->transfers) impl_->transfers->Recheck();
}

void RpcServer::StopServing() {
  if (impl_->server) impl_->server->GetHealthCheckService()->Shutdown();
}

void RpcServer::Drain(std::chrono::milliseconds drain) {
  Impl& s = *impl_;
  if (s.watches) s.watches->Stop();      // Open watch streams end.
  if (s.transfers) s.transfers->Stop();  // Open uploads end.
  if (s.server) {
    s.server->Shutdown(std::chrono::system_clock::now() + drain);
    s.server->Wait();
  }
  if (s.executor) s.executor->Stop();  // Every call's work has finished by now.
}

void RpcServer::Wait() {
  if (impl_->server) impl_->server->Wait();
}

}  // namespace posbias::rpc
