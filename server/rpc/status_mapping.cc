#include "server/rpc/status_mapping.h"

#include <string>

#include "posbias/v1/common.pb.h"
#include "server/status/error.h"

namespace posbias::rpc {
namespace {

posbias::v1::ErrorReason ReasonFromName(const std::string& name, absl::StatusCode code) {
  posbias::v1::ErrorReason reason = posbias::v1::ERROR_REASON_UNSPECIFIED;
  if (!name.empty() && posbias::v1::ErrorReason_Parse(name, &reason)) return reason;
  switch (code) {
    case absl::StatusCode::kInvalidArgument: return posbias::v1::INVALID_ARGUMENT;
    case absl::StatusCode::kResourceExhausted: return posbias::v1::REQUEST_TOO_LARGE;
    case absl::StatusCode::kUnimplemented: return posbias::v1::NOT_IMPLEMENTED;
    default: return posbias::v1::INTERNAL_ERROR;
  }
}

}  // namespace

grpc::Status ToGrpcStatus(const absl::Status& status, grpc::ServerContextBase* context) {
  if (status.ok()) return grpc::Status::OK;
  posbias::v1::ErrorDetail detail;
  detail.set_reason(ReasonFromName(ErrorReasonOf(status), status.code()));
  detail.set_field(ErrorFieldOf(status));
  detail.set_value(ErrorValueOf(status));
  detail.set_allowed(ErrorAllowedOf(status));
  if (context != nullptr) {
    context->AddTrailingMetadata("posbias-error-reason",
                                 posbias::v1::ErrorReason_Name(detail.reason()));
    context->AddTrailingMetadata("posbias-error-bin", detail.SerializeAsString());
  }
  std::string message(status.message());
  if (message.size() > kMaxErrorMessageBytes) {
    size_t cut = kMaxErrorMessageBytes;  // Not inside a UTF-8 character: back up over continuation bytes.
    while (cut > 0 && (static_cast<unsigned char>(message[cut]) & 0xC0) == 0x80) --cut;
    message.resize(cut);
  }
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), message);
}

const char* StatusCodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "UNKNOWN";
  }
}

}  // namespace posbias::rpc
