// Errors inside posbias: absl::Status values that carry a stable machine-readable reason.
//
// Every room below the RPC layer reports failure as an absl::Status built here. Besides the code and
// the human message, the status carries three payloads that grpc/status_mapping turns into the
// public posbias.v1.ErrorDetail: the reason (an ErrorReason of error_reason.h), the field
// at fault and the allowed range. Rooms never see the proto; they only name the reason.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "server/status/error_reason.h"

namespace posbias {

// The parts of an argument error, in the words the message uses.
struct FieldError {
  ErrorReason reason = ErrorReason::kInvalidArgument;
  std::string field;    // Request field, e.g. "alpha_schedule.alpha[3]".
  std::string value;    // The offending value, printed.
  std::string allowed;  // The allowed range, e.g. "[0, 1]".
};

// INVALID_ARGUMENT: "<field> = <value> is invalid: allowed <allowed>".
absl::Status InvalidArgumentError(const FieldError& error);

// RESOURCE_EXHAUSTED with reason REQUEST_TOO_LARGE: "<field> = <value> exceeds the limit <allowed>".
absl::Status TooLargeError(const std::string& field, const std::string& value,
                           const std::string& allowed);

// Any code with a reason and a free-form message.
absl::Status ErrorWithReason(absl::StatusCode code, ErrorReason reason,
                             const std::string& message);

// The same status (code, reason, field, allowed range) with another message.
absl::Status WithMessage(const absl::Status& status, const std::string& message);

// Accessors for the payloads; empty when absent (the reason as its proto name).
std::string ErrorReasonOf(const absl::Status& status);
std::string ErrorFieldOf(const absl::Status& status);
std::string ErrorValueOf(const absl::Status& status);
std::string ErrorAllowedOf(const absl::Status& status);

// Formats a double the way error messages print values: shortest round-trip form, "nan", "inf".
std::string FormatValue(double value);

}  // namespace posbias
