// The one mapping from an internal absl::Status to the gRPC status a client sees.
//
// The code maps one to one (absl and gRPC share the canonical codes); the message is bounded in
// length; the reason, field, value and allowed payloads become the `posbias-error-reason` and
// `posbias-error-bin` (a serialized posbias.v1.ErrorDetail) trailing metadata.
#pragma once

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"

namespace posbias::rpc {

inline constexpr size_t kMaxErrorMessageBytes = 1024;

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context);

// The canonical name of a gRPC status code, e.g. "INVALID_ARGUMENT" (used as a metric label).
const char* StatusCodeName(grpc::StatusCode code);

}  // namespace posbias::rpc
