// What every libFuzzer harness of tests/fuzz/libfuzzer/ checks, and how it fails.
//
// A harness feeds one input to a validator (or a whole pure handler) and checks the promise the
// server makes about refusals: an input is either accepted, or refused with an absl::Status that
// carries a stable reason (server/status/error_reason.h) and a code a client can act on — never
// INTERNAL, UNKNOWN or a reason-less status, and never a crash, a hang or a sanitizer report.
// A broken promise aborts, so libFuzzer records the input as a crash (and the replay test in the
// g++ build, which compiles the same harness sources, dies on it too).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/status/status.h"
#include "server/status/error.h"

namespace posbias::fuzz {

[[noreturn]] inline void Fail(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz check failed: %s: %s\n", what, detail.c_str());
  std::abort();
}

inline void Require(bool condition, const char* what, const std::string& detail = "") {
  if (!condition) Fail(what, detail);
}

// A refusal as the API promises it: a client-facing code and a stable, known reason.
inline void RequireCleanRefusal(const absl::Status& status, const char* where) {
  Require(!status.ok(), where, "expected a refusal");
  const std::string reason = ErrorReasonOf(status);
  Require(!reason.empty() && reason != "ERROR_REASON_UNSPECIFIED", where,
          "refusal without a reason: " + status.ToString());
  Require(reason != "INTERNAL_ERROR", where, "INTERNAL_ERROR for a client's input: " + status.ToString());
  const absl::StatusCode code = status.code();
  Require(code != absl::StatusCode::kInternal && code != absl::StatusCode::kUnknown &&
              code != absl::StatusCode::kDataLoss,
          where, "server-side code for a client's input: " + status.ToString());
}

}  // namespace posbias::fuzz
