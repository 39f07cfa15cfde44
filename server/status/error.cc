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

// The payloads become string fields of posbias.v1.ErrorDetail, which protobuf parsers reject unless
// they are valid UTF-8; a value cut to a length (labels, page tokens) may end inside a character, and
// one read from a file may hold any bytes. Each byte of an invalid or cut sequence becomes U+FFFD.
std::string ValidUtf8(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  const auto byte = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  for (size_t i = 0; i < text.size();) {
    const unsigned char lead = byte(i);
    size_t length = 0;  // Of the sequence `lead` starts; 0: not a lead byte.
    if (lead < 0x80) {
      length = 1;
    } else if (lead >= 0xC2 && lead <= 0xDF) {
      length = 2;
    } else if (lead >= 0xE0 && lead <= 0xEF) {
      length = 3;
    } else if (lead >= 0xF0 && lead <= 0xF4) {
      length = 4;
    }
    bool valid = length > 0 && i + length <= text.size();
    for (size_t k = 1; valid && k < length; ++k) valid = (byte(i + k) & 0xC0) == 0x80;
    if (valid && length >= 3) {  // No overlong forms, no surrogates, nothing above U+10FFFF.
      const unsigned char second = byte(i + 1);
      valid = !(lead == 0xE0 && second < 0xA0) && !(lead == 0xED && second > 0x9F) &&
              !(lead == 0xF0 && second < 0x90) && !(lead == 0xF4 && second > 0x8F);
    }
    if (valid) {
      out.append(text, i, length);
      i += length;
    } else {
      out += "\xEF\xBF\xBD";
      ++i;
    }
  }
  return out;
}

// They travel in trailing metadata, which clients refuse whole beyond a limit (gRPC's default is
// 8 KiB): a value echoing a long request string is cut, like the message (kMaxErrorMessageBytes).
constexpr size_t kMaxPayloadBytes = 512;

absl::Cord DetailPayload(const std::string& text) {
  std::string out = ValidUtf8(text);
  if (out.size() > kMaxPayloadBytes) {
    size_t cut = kMaxPayloadBytes - 3;  // Not inside a character: back up over continuation bytes.
    while (cut > 0 && (static_cast<unsigned char>(out[cut]) & 0xC0) == 0x80) --cut;
    out.resize(cut);
    out += "...";
  }
  return absl::Cord(out);
}

absl::Status WithPayloads(absl::Status status, ErrorReason reason, const std::string& field,
                          const std::string& value, const std::string& allowed) {
  status.SetPayload(kReasonUrl, absl::Cord(std::string(ErrorReasonName(reason))));
  if (!field.empty()) status.SetPayload(kFieldUrl, DetailPayload(field));
  if (!value.empty()) status.SetPayload(kValueUrl, DetailPayload(value));
  if (!allowed.empty()) status.SetPayload(kAllowedUrl, DetailPayload(allowed));
  return status;
}

std::string PayloadOf(const absl::Status& status, const char* url) {
  auto payload = status.GetPayload(url);
  return payload ? std::string(*payload) : std::string();
}

}  // namespace

absl::Status InvalidArgumentError(const FieldError& error) {
  return WithPayloads(
      absl::InvalidArgumentError(ValidUtf8(absl::StrCat(error.field, " = ", error.value,
                                                        " is invalid: allowed ", error.allowed))),
      error.reason, error.field, error.value, error.allowed);
}

absl::Status TooLargeError(const std::string& field, const std::string& value,
                           const std::string& allowed) {
  return WithPayloads(absl::ResourceExhaustedError(ValidUtf8(absl::StrCat(
                          field, " = ", value, " exceeds the server limit: allowed ", allowed))),
                      ErrorReason::kRequestTooLarge, field, value, allowed);
}

absl::Status ErrorWithReason(absl::StatusCode code, ErrorReason reason,
                             const std::string& message) {
  return WithPayloads(absl::Status(code, message), reason, "", "", "");
}

absl::Status WithMessage(const absl::Status& status, const std::string& message) {
  if (status.ok()) return status;
  absl::Status copy(status.code(), message);
  status.ForEachPayload([&](absl::string_view url, const absl::Cord& payload) { copy.SetPayload(url, payload); });
  return copy;
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
