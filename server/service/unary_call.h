// One unary RPC on the callback API: the call's work runs on the CallExecutor and finishes the
// call's reactor with its status (mapped once, recorded in the metrics with the time the call
// waited and ran). A full executor queue ends the call at once with RESOURCE_EXHAUSTED and reason
// SERVER_BUSY. The method, its role and its audit come from the request's type (api_methods.h),
// so no handler names its method; every enum in the request is checked before the work runs. An
// RPC method reads:
//   return RunUnary(context, executor_, metrics_, auth_, *request,
//                   [=](Caller& caller) { return Do(caller, *request, response); });
#pragma once

#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "server/service/call_auth.h"
#include "server/service/call_executor.h"
#include "server/service/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::service {

inline absl::Status ServerBusy() {
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kServerBusy,
                         "the server's queue of waiting calls is full; retry with backoff");
}

// The call's work with the caller when it takes one (tenancy, the audit's resource).
template <typename Work>
absl::Status RunWork(Work& work, Caller& caller) {
  if constexpr (std::is_invocable_v<Work&, Caller&>) {
    return work(caller);
  } else {
    return work();
  }
}

// Admits the caller (call_auth.h) on gRPC's thread, then runs the work on the executor.
template <typename Work>
grpc::ServerUnaryReactor* RunUnary(grpc::CallbackServerContext* context, CallExecutor* executor,
                                   metrics::Metrics* metrics, const CallAuth* auth,
                                   const google::protobuf::Message& request, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  auto scope = std::make_shared<RpcScope>(metrics, std::string(auth->MethodFor(request.GetDescriptor())));
  auto caller = auth->AdmitRequest(context, request);
  if (!caller.ok()) {
    reactor->Finish(scope->Finish(caller.status(), context));
    return reactor;
  }
  const bool queued = executor->TrySubmit(
      [context, reactor, scope, caller = *std::move(caller), work = std::move(work)]() mutable {
        const absl::Status status = RunWork(work, caller);
        CallAuth::Audit(caller, status);
        reactor->Finish(scope->Finish(status, context));
      });
  if (!queued) reactor->Finish(scope->Finish(ServerBusy(), context));
  return reactor;
}

// RunUnary for a gRPC-free handler `handle(caller, request) -> absl::StatusOr<Response>` (the
// *_requests.h functions): its answer is moved into `response`. An RPC method reads:
//   return AnswerUnary(context, executor_, metrics_, auth_, request, response,
//                      [this](Caller& caller, const auto& r) { return requests_.Get(caller, r); });
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* AnswerUnary(grpc::CallbackServerContext* context, CallExecutor* executor,
                                      metrics::Metrics* metrics, const CallAuth* auth, const Request* request,
                                      Response* response, Handle handle) {
  return RunUnary(context, executor, metrics, auth, *request, [=](Caller& caller) {
    auto answer = handle(caller, *request);
    if (answer.ok()) *response = *std::move(answer);
    return answer.status();
  });
}

// The same, answered on gRPC's thread without waiting for the executor: for calls that must be
// answered even when the server is busy (CancelJob) and take only a moment.
template <typename Work>
grpc::ServerUnaryReactor* RunUnaryInline(grpc::CallbackServerContext* context, metrics::Metrics* metrics,
                                         const CallAuth* auth, const google::protobuf::Message& request, Work work) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  RpcScope scope(metrics, std::string(auth->MethodFor(request.GetDescriptor())));
  auto caller = auth->AdmitRequest(context, request);
  absl::Status status = caller.status();
  if (caller.ok()) {
    status = RunWork(work, *caller);
    CallAuth::Audit(*caller, status);
  }
  reactor->Finish(scope.Finish(status, context));
  return reactor;
}

}  // namespace posbias::service
