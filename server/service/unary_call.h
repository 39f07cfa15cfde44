// One unary RPC on the callback API: the call's work runs on the CallExecutor and finishes the
// call's reactor with its status (mapped once, recorded in the metrics with the time the call
// waited and ran). A full executor queue ends the call at once with RESOURCE_EXHAUSTED and reason
// SERVER_BUSY. An RPC method reads:
//   return RunUnary(context, executor_, metrics_, "/pkg.Service/Method", [=] { return Do(*request, response); });
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "server/service/call_executor.h"
#include "server/service/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::service {

inline absl::Status ServerBusy() {
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kServerBusy,
                         "the server's queue of waiting calls is full; retry with backoff");
}

template <typename Work>
grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* context, CallExecutor* executor,
                                   metrics::Metrics* metrics, std::string method, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(metrics, std::move(method));
  const bool queued = executor->TrySubmit([context, reactor, scope, work = std::move(work)]() mutable {
    const absl::Status status = work();
    reactor->Finish(scope->Finish(status, context));
  });
  if (!queued) reactor->Finish(scope->Finish(ServerBusy(), context));
  return reactor;
}

// The same, answered on gRPC's thread without waiting for the executor: for calls that must be
// answered even when the server is busy (CancelJob) and take only a moment.
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryInline(grpc::CallbackServerContext* context, metrics::Metrics* metrics,
                                         std::string method, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RpcScope scope(metrics, std::move(method));
  reactor->Finish(scope.Finish(work(), context));
  return reactor;
}

}  // namespace posbias::service
