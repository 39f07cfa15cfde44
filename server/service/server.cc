#include "server/service/server.h"

#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/health_check_service_interface.h>

#include "absl/strings/str_cat.h"

namespace posbias::service {

Server::Server(Options options, metrics::Metrics* metrics)
    : options_(std::move(options)),
      metrics_(metrics),
      density_service_(options_.density_limits, metrics_),
      model_service_(metrics_),
      job_service_(metrics_) {}

Server::~Server() {
  if (server_ && !shut_down_) Shutdown(std::chrono::milliseconds(0));
}

absl::Status Server::Start() {
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options_.listen_address, grpc::InsecureServerCredentials(), &port_);
  // One socket per address: with SO_REUSEPORT gRPC binds a second one, which for port 0 lands on
  // a different, unreported port.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options_.max_message_bytes);
  builder.SetMaxSendMessageSize(options_.max_message_bytes);
  grpc::ResourceQuota quota("posbias");
  quota.SetMaxThreads(options_.max_rpc_threads);
  builder.SetResourceQuota(quota);
  builder.RegisterService(&density_service_);
  builder.RegisterService(&model_service_);
  builder.RegisterService(&job_service_);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for gRPC on ", options_.listen_address,
                     " (address in use, or not a valid host:port)"));
  }
  auto* health = server_->GetHealthCheckService();
  health->SetServingStatus("", true);
  health->SetServingStatus(kDensityServiceName, true);
  health->SetServingStatus(kModelServiceName, false);
  health->SetServingStatus(kJobServiceName, false);
  return absl::OkStatus();
}

void Server::Shutdown(std::chrono::milliseconds drain) {
  if (!server_ || shut_down_) return;
  shut_down_ = true;
  server_->GetHealthCheckService()->Shutdown();
  server_->Shutdown(std::chrono::system_clock::now() + drain);
  server_->Wait();
}

void Server::Wait() {
  if (server_) server_->Wait();
}

}  // namespace posbias::service
