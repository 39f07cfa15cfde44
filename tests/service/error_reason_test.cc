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

}  // namespace
}  // namespace posbias
