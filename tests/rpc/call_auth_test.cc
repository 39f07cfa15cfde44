// An audit line's client strings cannot end the line or pose as another field.
#include "server/rpc/call_auth.h"

#include <string>

#include "gtest/gtest.h"

namespace posbias::rpc {
namespace {

TEST(AuditQuoted, APlainIdIsQuotedAsItIs) { EXPECT_EQ(AuditQuoted("3f2a9c"), "\"3f2a9c\""); }

TEST(AuditQuoted, ANewlineAQuoteAndABackslashCannotForgeALine) {
  const std::string forged = "x\n[info] audit principal=admin method=/posbias.v1.ModelService/DeleteModel outcome=OK\"\\";
  const std::string quoted = AuditQuoted(forged);
  EXPECT_EQ(quoted.find('\n'), std::string::npos);
  EXPECT_EQ(quoted, "\"x\\x0a[info] audit principal=admin method=/posbias.v1.ModelService/DeleteModel outcome=OK\\\"\\\\\"");
  // Only the first and last characters are unescaped quotes.
  for (size_t i = 1; i + 1 < quoted.size(); ++i) {
    if (quoted[i] == '"') {
      EXPECT_EQ(quoted[i - 1], '\\') << i;
    }
  }
}

TEST(AuditQuoted, ControlAndNonAsciiBytesAreHexAndLongValuesAreCut) {
  EXPECT_EQ(AuditQuoted(std::string("a\0b\x7f\xc3\xa9", 6)), "\"a\\x00b\\x7f\\xc3\\xa9\"");
  const std::string quoted = AuditQuoted(std::string(10'000, 'z'));
  EXPECT_EQ(quoted, "\"" + std::string(kMaxAuditValueBytes, 'z') + "...(10000 bytes)\"");
}

}  // namespace
}  // namespace posbias::rpc
