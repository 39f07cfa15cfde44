// The posbias gRPC server: the v1 services, gRPC health (overall and per service) and reflection.
//
// Lifecycle: constructed -> Start() (listening; health SERVING) -> Shutdown(drain) (health
// NOT_SERVING, no new calls, in-flight calls get until the drain deadline, then are cancelled) ->
// destroyed. Start and Shutdown are each called once, from one thread.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "server/metrics/metrics.h"
#include "server/service/density_service_impl.h"
#include "server/service/unimplemented_services.h"

namespace posbias::service {

// Full names of the services, as health checks and reflection know them.
inline constexpr char kDensityServiceName[] = "posbias.v1.DensityService";
inline constexpr char kModelServiceName[] = "posbias.v1.ModelService";
inline constexpr char kJobServiceName[] = "posbias.v1.JobService";

class Server {
 public:
  struct Options {
    std::string listen_address = "127.0.0.1:50051";  // host:port; port 0 picks a free port.
    DensityLimits density_limits;
    int max_message_bytes = 64 << 20;  // Largest request or response, in bytes.
    int max_rpc_threads = 16;          // Threads handling RPCs concurrently.
  };

  Server(Options options, metrics::Metrics* metrics);
  ~Server();

  absl::Status Start();
  // The port actually bound (useful with port 0).
  int port() const { return port_; }
  // Stops accepting calls and waits up to `drain` for in-flight calls before cancelling them.
  void Shutdown(std::chrono::milliseconds drain);
  void Wait();

 private:
  Options options_;
  metrics::Metrics* metrics_;
  DensityServiceImpl density_service_;
  UnimplementedModelService model_service_;  // Until the model registry lands.
  UnimplementedJobService job_service_;      // Until the job queue lands.
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  bool shut_down_ = false;
};

}  // namespace posbias::service
