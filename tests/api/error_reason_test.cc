// The rooms' error reasons (server/status/error_reason.h) and the public posbias.v1.ErrorReason
// are one list: same names, same numbers, none missing on either side.
#include <gtest/gtest.h>

#include <string>

#include "posbias/v1/common.pb.h"
#include "server/status/error.h"
#include "server/status/error_reason.h"

namespace posbias {
namespace {

TEST(ErrorReasons, EveryReasonIsAProtoReasonWithTheSameNumber) {
  for (ErrorReason reason : kAllErrorReasons) {
    v1::ErrorReason proto = v1::ERROR_REASON_UNSPECIFIED;
    ASSERT_TRUE(v1::ErrorReason_Parse(std::string(ErrorReasonName(reason)), &proto)) << ErrorReasonName(reason);
    EXPECT_EQ(static_cast<int>(proto), static_cast<int>(reason)) << ErrorReasonName(reason);
  }
}

TEST(ErrorReasons, EveryProtoReasonHasAnEnumerator) {
  const auto* descriptor = v1::ErrorReason_descriptor();
  int known = 0;
  for (int i = 0; i < descriptor->value_count(); ++i) {
    if (descriptor->value(i)->number() == v1::ERROR_REASON_UNSPECIFIED) continue;
    ++known;
    bool found = false;
    for (ErrorReason reason : kAllErrorReasons) found |= ErrorReasonName(reason) == descriptor->value(i)->name();
    EXPECT_TRUE(found) << descriptor->value(i)->name() << " has no ErrorReason enumerator";
  }
  EXPECT_EQ(known, static_cast<int>(std::size(kAllErrorReasons)));
}

TEST(ErrorReasons, AStatusCarriesItsReasonByName) {
  EXPECT_EQ(ErrorReasonOf(ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kModelNotFound, "no model")),
            "MODEL_NOT_FOUND");
}

// The payloads become ErrorDetail's string fields in the posbias-error-bin trailer: valid UTF-8
// (protobuf parsers refuse anything else) and bounded (clients refuse trailers beyond 8 KiB).
TEST(ErrorPayloads, AreValidUtf8AndBounded) {
  const std::string cut_inside_a_character = std::string(63, 'a') + "\xC3";  // Labels are cut at 64 bytes.
  const absl::Status status = InvalidArgumentError({ErrorReason::kInvalidArgument, "labels", cut_inside_a_character, "x"});
  EXPECT_EQ(ErrorValueOf(status), std::string(63, 'a') + "\xEF\xBF\xBD");
  v1::ErrorDetail detail;
  detail.set_value(ErrorValueOf(status));
  v1::ErrorDetail parsed;
  EXPECT_TRUE(parsed.ParseFromString(detail.SerializeAsString()));
  EXPECT_EQ(ErrorValueOf(InvalidArgumentError({ErrorReason::kInvalidArgument, "f", "\xF0\x9F\x98\x80 \xED\xA0\x80", "x"})),
            "\xF0\x9F\x98\x80 \xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");  // U+1F600 kept; a surrogate is not UTF-8.
  const std::string value = ErrorValueOf(TooLargeError("f", std::string(100000, 'z'), "x"));
  EXPECT_LE(value.size(), 512u);
  EXPECT_EQ(value.substr(value.size() - 3), "...");
}

}  // namespace
}  // namespace posbias
