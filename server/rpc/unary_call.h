// One unary RPC on the callback API: the call's work runs on the CallExecutor and finishes the
// call's reactor with its status (mapped once, recorded in the metrics with the time the call
// waited and ran). A full executor queue ends the call at once with RESOURCE_EXHAUSTED and reason
// SERVER_BUSY. The method, its role and its audit come from the request's type (api_methods.h),
// so no handler names its method; every enum in the request is checked before the work runs.
// The generated wiring (generate_wiring.cc) calls AnswerUnary for every unary RPC; RunUnary is
// for work that is not a handler.
#pragma once

#include <memory>
#include <string>
#include <utility>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "server/limits/limits.h"
#include "server/rpc/call_auth.h"
#include "server/rpc/call_executor.h"
#include "server/rpc/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::rpc {

// What every call needs besides its handler: where its work runs, its metrics, its door. The
// server fills it before it starts.
struct CallRuntime {
  CallExecutor* executor = nullptr;
  metrics::Metrics* metrics = nullptr;
  const CallAuth* auth = nullptr;
};

// What a call gets when `executor`'s queue is full.
inline absl::Status ServerBusy(const CallExecutor& executor) {
  return ErrorWithReason(
      absl::StatusCode::kResourceExhausted, ErrorReason::kServerBusy,
      absl::StrCat("the server's queue of waiting calls is full (",
                   limits::Allowed(limits::Limit::kMaxWaitingCalls, static_cast<double>(executor.options().max_queued)),
                   "); retry with backoff"));
}

// A handler `handle(caller, request) -> absl::StatusOr<Response>` as a call's work
// `(caller) -> absl::Status`: its answer is moved into `response`.
template <typename Request, typename Response, typename Handle>
auto AnswerInto(const Request* request, Response* response, Handle handle) {
  return [request, response, handle = std::move(handle)](api::Caller& caller) {
    auto answer = handle(caller, *request);
    if (answer.ok()) *response = *std::move(answer);
    return answer.status();
  };
}

// Admits the caller (call_auth.h) on gRPC's thread, then runs `work(caller)` on the executor.
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
  caller->client_gone = [context] { return context->IsCancelled(); };
  const std::string tenant = caller->tenant();  // The executor is fair between tenants.
  const bool queued = executor->TrySubmit(
      tenant, [context, reactor, scope, caller = *std::move(caller), work = std::move(work)]() mutable {
        const absl::Status status = work(caller);
        CallAuth::Audit(caller, status);
        reactor->Finish(scope->Finish(status, context));
      });
  if (!queued) reactor->Finish(scope->Finish(ServerBusy(*executor), context));
  return reactor;
}

// RunUnary for a gRPC-free handler `handle(caller, request) -> absl::StatusOr<Response>` (the
// Handle* functions of server/api/v1_handlers.h): its answer is moved into `response`.
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* AnswerUnary(grpc::CallbackServerContext* context, const CallRuntime& runtime,
                                      const Request* request, Response* response, Handle handle) {
  return RunUnary(context, runtime.executor, runtime.metrics, runtime.auth, *request,
                  AnswerInto(request, response, std::move(handle)));
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
    caller->client_gone = [context] { return context->IsCancelled(); };
    status = work(*caller);
    CallAuth::Audit(*caller, status);
  }
  reactor->Finish(scope.Finish(status, context));
  return reactor;
}

// AnswerUnary on gRPC's thread (RunUnaryInline): for RPCs whose policy says answer_when_busy.
template <typename Request, typename Response, typename Handle>
grpc::ServerUnaryReactor* AnswerUnaryInline(grpc::CallbackServerContext* context, const CallRuntime& runtime,
                                            const Request* request, Response* response, Handle handle) {
  return RunUnaryInline(context, runtime.metrics, runtime.auth, *request,
                        AnswerInto(request, response, std::move(handle)));
}

}  // namespace posbias::rpc
