// Times one RPC and records it: in-flight gauge while it runs, then count and latency by method and
// status code. An RPC method reads: RpcScope scope(metrics, "Method"); ...; return scope.Finish(s).
#pragma once

#include <chrono>
#include <string>

#include <grpcpp/grpcpp.h>

#include "server/metrics/metrics.h"
#include "server/rpc/status_mapping.h"

namespace posbias::rpc {

class RpcScope {
 public:
  RpcScope(metrics::Metrics* metrics, std::string method)
      : metrics_(metrics), method_(std::move(method)), start_(std::chrono::steady_clock::now()) {
    if (metrics_ != nullptr) metrics_->rpcs_in_flight().Increment();
  }
  RpcScope(const RpcScope&) = delete;
  RpcScope& operator=(const RpcScope&) = delete;
  ~RpcScope() {
    if (metrics_ != nullptr && !finished_) metrics_->rpcs_in_flight().Decrement();
  }

  // The call's gRPC status; the call is recorded as finished (and no longer in flight) before the
  // status goes out, so a client that sees the answer sees the metrics too.
  grpc::Status Finish(const absl::Status& status, grpc::ServerContextBase* context) {
    grpc::Status result = ToGrpcStatus(status, context);
    if (metrics_ != nullptr && !finished_) {
      metrics_->rpcs_in_flight().Decrement();
      const double seconds =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
      metrics_->RecordRpc(method_, StatusCodeName(result.error_code()), seconds);
    }
    finished_ = true;
    return result;
  }

 private:
  metrics::Metrics* metrics_;
  bool finished_ = false;
  std::string method_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace posbias::rpc
