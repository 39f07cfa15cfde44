#include "server/status/error.h"

#include <charconv>
#include <cmath>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"

namespace posbias {
namespace {

constexpr char kReasonUrl[] = "type.posbias.dev/reason";
constexpr char kFieldUrl[] = "type.posbias.dev/field";
constexpr char kValueUrl[] = "type.posbias.dev/value";
constexpr char kAllowedUrl[] = "type.posbias.dev/allowed";

absl::Status WithPayloads(absl::Status status, ErrorReason reason, const std::string& field,
                          const std::string& value, const std::string& allowed) {
  status.SetPayload(kReasonUrl, absl::Cord(std::string(ErrorReasonName(reason))));
  if (!field.empty()) status.SetPayload(kFieldUrl, absl::Cord(field));
  if (!value.empty()) status.SetPayload(kValueUrl, absl::Cord(value));
  if (!allowed.empty()) status.SetPayload(kAllowedUrl, absl::Cord(allowed));
  return status;
}

std::string PayloadOf(const absl::Status& status, const char* url) {
  auto payload = status.GetPayload(url);
  return payload ? std::string(*payload) : std::string();
}

}  // namespace

absl::Status InvalidArgumentError(const FieldError& error) {
  return WithPayloads(
      absl::InvalidArgumentError(absl::StrCat(error.field, " = ", error.value,
                                              " is invalid: allowed ", error.allowed)),
      error.reason, error.field, error.value, error.allowed);
}

absl::Status TooLargeError(const std::string& field, const std::string& value,
                           const std::string& allowed) {
  return WithPayloads(absl::ResourceExhaustedError(absl::StrCat(
                          field, " = ", value, " exceeds the server limit: allowed ", allowed)),
                      ErrorReason::kRequestTooLarge, field, value, allowed);
}

absl::Status ErrorWithReason(absl::StatusCode code, ErrorReason reason,
                             const std::string& message) {
  return WithPayloads(absl::Status(code, message), reason, "", "", "");
}

std::string ErrorReasonOf(const absl::Status& status) { return PayloadOf(status, kReasonUrl); }
std::string ErrorFieldOf(const absl::Status& status) { return PayloadOf(status, kFieldUrl); }
std::string ErrorValueOf(const absl::Status& status) { return PayloadOf(status, kValueUrl); }
std::string ErrorAllowedOf(const absl::Status& status) { return PayloadOf(status, kAllowedUrl); }

std::string FormatValue(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : std::string("?");
}

}  // namespace posbias
