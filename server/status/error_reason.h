// The stable error reasons of posbias, one enumerator per posbias.v1.ErrorReason value (same
// names, same numbers). Rooms name a reason through this enum, so a misspelled reason is a
// compile error instead of a silent ERROR_REASON_UNSPECIFIED on the wire; the service test
// `ErrorReasons.EveryReasonIsAProtoReason` checks that the two lists agree.
#pragma once

#include <string_view>

namespace posbias {

// X(enumerator, proto name, proto number).
#define POSBIAS_ERROR_REASONS(X)                              \
  X(kInvalidDepth, "INVALID_DEPTH", 1)                        \
  X(kInvalidAlpha, "INVALID_ALPHA", 2)                        \
  X(kInvalidPoint, "INVALID_POINT", 3)                        \
  X(kInvalidLength, "INVALID_LENGTH", 4)                      \
  X(kInvalidPosition, "INVALID_POSITION", 5)                  \
  X(kEmptyRequest, "EMPTY_REQUEST", 6)                        \
  X(kRequestTooLarge, "REQUEST_TOO_LARGE", 7)                 \
  X(kInvalidProfile, "INVALID_PROFILE", 8)                    \
  X(kInvalidBands, "INVALID_BANDS", 9)                        \
  X(kInvalidArgument, "INVALID_ARGUMENT", 10)                 \
  X(kFitFailed, "FIT_FAILED", 11)                             \
  X(kInvalidEnumValue, "INVALID_ENUM_VALUE", 12)              \
  X(kModelNotFound, "MODEL_NOT_FOUND", 20)                    \
  X(kModelAlreadyExists, "MODEL_ALREADY_EXISTS", 21)          \
  X(kModelNotReady, "MODEL_NOT_READY", 22)                    \
  X(kInvalidModelFile, "INVALID_MODEL_FILE", 23)              \
  X(kPathNotAllowed, "PATH_NOT_ALLOWED", 24)                  \
  X(kModelInUse, "MODEL_IN_USE", 25)                          \
  X(kChecksumMismatch, "CHECKSUM_MISMATCH", 26)               \
  X(kModelBuiltin, "MODEL_BUILTIN", 27)                       \
  X(kPathNotFound, "PATH_NOT_FOUND", 28)                      \
  X(kModelChanged, "MODEL_CHANGED", 29)                       \
  X(kJobNotFound, "JOB_NOT_FOUND", 30)                        \
  X(kQueueFull, "QUEUE_FULL", 31)                             \
  X(kInsufficientMemory, "INSUFFICIENT_MEMORY", 32)           \
  X(kJobNotFinished, "JOB_NOT_FINISHED", 33)                  \
  X(kDeviceUnavailable, "DEVICE_UNAVAILABLE", 34)             \
  X(kJobTimeLimitExceeded, "JOB_TIME_LIMIT_EXCEEDED", 35)     \
  X(kMeasurementNotFinite, "MEASUREMENT_NOT_FINITE", 36)      \
  X(kAttemptsExhausted, "ATTEMPTS_EXHAUSTED", 37)             \
  X(kRequestIdReused, "REQUEST_ID_REUSED", 38)                \
  X(kTorchScriptDisabled, "TORCHSCRIPT_DISABLED", 39)         \
  X(kInsufficientStorage, "INSUFFICIENT_STORAGE", 40)         \
  X(kRoleRequired, "ROLE_REQUIRED", 41)                       \
  X(kQuotaExceeded, "QUOTA_EXCEEDED", 42)                     \
  X(kAuthenticationRequired, "AUTHENTICATION_REQUIRED", 43)   \
  X(kNotImplemented, "NOT_IMPLEMENTED", 90)                   \
  X(kShuttingDown, "SHUTTING_DOWN", 91)                       \
  X(kServerBusy, "SERVER_BUSY", 92)                           \
  X(kInternalError, "INTERNAL_ERROR", 99)

enum class ErrorReason {
#define POSBIAS_REASON_ENUMERATOR(enumerator, name, number) enumerator = number,
  POSBIAS_ERROR_REASONS(POSBIAS_REASON_ENUMERATOR)
#undef POSBIAS_REASON_ENUMERATOR
};

// The proto name, e.g. "INVALID_DEPTH".
constexpr std::string_view ErrorReasonName(ErrorReason reason) {
  switch (reason) {
#define POSBIAS_REASON_CASE(enumerator, name, number) \
  case ErrorReason::enumerator:                      \
    return name;
    POSBIAS_ERROR_REASONS(POSBIAS_REASON_CASE)
#undef POSBIAS_REASON_CASE
  }
  return "INTERNAL_ERROR";
}

// Every reason, in proto order (tests iterate over them).
inline constexpr ErrorReason kAllErrorReasons[] = {
#define POSBIAS_REASON_ITEM(enumerator, name, number) ErrorReason::enumerator,
    POSBIAS_ERROR_REASONS(POSBIAS_REASON_ITEM)
#undef POSBIAS_REASON_ITEM
};

}  // namespace posbias
