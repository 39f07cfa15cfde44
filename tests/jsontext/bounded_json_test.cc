// Untrusted JSON parsed in linear time with its bounds (server/jsontext/bounded_json.h): a header
// of a quarter million entries parses (the callback parser it replaces took minutes at that size),
// nesting and entry counts are refused while parsing, a stop check ends a long parse, and a syntax
// error names its byte.
#include "server/jsontext/bounded_json.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace posbias::jsontext {
namespace {

// {"t0": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, "t1": ...}: a safetensors header.
std::string HeaderOf(int64_t tensors) {
  std::string text = "{";
  for (int64_t i = 0; i < tensors; ++i) {
    absl::StrAppend(&text, i == 0 ? "" : ",", "\"t", i, "\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[",
                    4 * i, ",", 4 * i + 4, "]}");
  }
  return text + "}";
}

TEST(BoundedJson, AHeaderOfAQuarterMillionObjectsParsesWhole) {
  const Parsed parsed = Parse(HeaderOf(262144), {});
  ASSERT_EQ(parsed.outcome, ParseOutcome::kOk) << Describe(parsed, {});
  EXPECT_EQ(parsed.value.size(), 262144u);
  EXPECT_EQ(parsed.value["t262143"]["data_offsets"][1], 4 * 262144);
}

TEST(BoundedJson, MoreEntriesThanAllowedAreRefusedWhileParsing) {
  ParseBounds bounds;
  bounds.max_entries = 1000;
  const Parsed parsed = Parse(HeaderOf(1001), bounds);
  EXPECT_EQ(parsed.outcome, ParseOutcome::kTooManyEntries);
  EXPECT_LT(parsed.tokens, 1001 * 14) << "refused at the 1001st key, before the rest was read";
  EXPECT_EQ(Describe(parsed, bounds), "has an object or array of more than 1000 entries");
  std::string array = "[0";
  for (int i = 1; i <= 1000; ++i) absl::StrAppend(&array, ",", i);
  EXPECT_EQ(Parse(array + "]", bounds).outcome, ParseOutcome::kTooManyEntries) << "arrays count their elements";
}

TEST(BoundedJson, NestingDeeperThanTheBoundIsRefusedBeforeItIsBuilt) {
  ParseBounds bounds;
  bounds.max_depth = 64;
  EXPECT_EQ(Parse(std::string(64, '[') + std::string(64, ']'), bounds).outcome, ParseOutcome::kOk);
  const Parsed deep = Parse(std::string(1'000'000, '[') + std::string(1'000'000, ']'), bounds);
  EXPECT_EQ(deep.outcome, ParseOutcome::kTooDeep);
  EXPECT_EQ(Describe(deep, bounds), "is nested deeper than 64 levels");
}

TEST(BoundedJson, AStopCheckEndsALongParse) {
  int asked = 0;
  ParseBounds bounds;
  bounds.stop = [&asked] { return ++asked == 3; };
  const Parsed parsed = Parse(HeaderOf(100000), bounds);
  EXPECT_EQ(parsed.outcome, ParseOutcome::kStopped);
  EXPECT_EQ(asked, 3);
  EXPECT_EQ(parsed.tokens, 3 * bounds.stop_every) << "stopped at the third check";
  EXPECT_TRUE(parsed.value.is_null());
}

TEST(BoundedJson, ASyntaxErrorNamesItsByteAndNaNIsOne) {
  const Parsed nan = Parse(R"({"eps": NaN})", {});
  EXPECT_EQ(nan.outcome, ParseOutcome::kSyntaxError);
  EXPECT_EQ(nan.byte, 9u) << "the 1-based offset of the N";
  EXPECT_EQ(Describe(nan, {}),
            "is not valid JSON: a syntax error at byte 9 (NaN, Infinity, comments and trailing commas are not JSON)");
  EXPECT_EQ(Parse("[1, 2,]", {}).outcome, ParseOutcome::kSyntaxError);
  const Parsed nul = Parse(std::string_view("{\"a\": 1}\0{", 10), {});  // nlohmann would stop at the NUL.
  EXPECT_EQ(nul.outcome, ParseOutcome::kSyntaxError);
  EXPECT_EQ(nul.byte, 9u);
  EXPECT_EQ(Parse("", {}).outcome, ParseOutcome::kSyntaxError);
}

TEST(BoundedJson, TheTopLevelKeysAreSeenInOrderDuplicatesIncluded) {
  std::string keys;
  ParseBounds bounds;
  bounds.top_level_key = [&keys](const std::string& key) { keys += key + ";"; };
  const Parsed parsed = Parse(R"({"b": {"inner": 1}, "a": 2, "b": 3})", bounds);
  ASSERT_EQ(parsed.outcome, ParseOutcome::kOk);
  EXPECT_EQ(keys, "b;a;b;") << "nested keys are not top-level ones";
  EXPECT_EQ(parsed.value["b"], 3) << "the DOM keeps the last value";
}

}  // namespace
}  // namespace posbias::jsontext
