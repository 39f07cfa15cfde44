// The names clients choose, checked as the proto's header says: labels, label selectors and
// request ids, each refusal naming its field.
#include "server/naming/client_names.h"

#include <gtest/gtest.h>

#include <string>

#include "server/status/error.h"

namespace posbias::naming {
namespace {

TEST(CheckLabels, TakesLowercaseKeysAndPlainValuesAndNamesTheLabelItRefuses) {
  EXPECT_TRUE(CheckLabels({{"team", "a"}, {"sweep/v2", "x.y:z-1"}}).ok());
  EXPECT_EQ(ErrorFieldOf(CheckLabels({{"Team", "a"}})), "labels");
  EXPECT_EQ(ErrorFieldOf(CheckLabels({{"team", "a b"}})), "labels[\"team\"]");
  EXPECT_EQ(ErrorFieldOf(CheckLabels({{std::string(64, 'k'), "a"}})), "labels");
  std::map<std::string, std::string> many;
  for (size_t i = 0; i <= kMaxLabels; ++i) many["k" + std::to_string(i)] = "v";
  EXPECT_EQ(CheckLabels(many).code(), absl::StatusCode::kInvalidArgument) << "one label over the limit";
}

TEST(CheckRequestId, TakesNoneOrUpTo128PlainCharacters) {
  EXPECT_TRUE(CheckRequestId("").ok());
  EXPECT_TRUE(CheckRequestId(std::string(128, 'r')).ok());
  EXPECT_EQ(ErrorFieldOf(CheckRequestId(std::string(129, 'r'))), "request_id");
  EXPECT_EQ(ErrorFieldOf(CheckRequestId("a/b")), "request_id") << "a '/' would split the stored key";
}

TEST(LabelSelector, EveryTermMustMatch) {
  auto terms = ParseLabelSelector("team=a,sweep=b");
  ASSERT_TRUE(terms.ok()) << terms.status();
  EXPECT_TRUE(MatchesLabels({{"team", "a"}, {"sweep", "b"}, {"x", "y"}}, *terms));
  EXPECT_FALSE(MatchesLabels({{"team", "a"}}, *terms));
  EXPECT_TRUE(ParseLabelSelector("")->empty());
  EXPECT_TRUE(ParseLabelSelector("team=")->count("team"));
  for (const char* bad : {"team", "team=a,", ",team=a", "team=a, sweep=b", "team=a,team=b", "Team=a"}) {
    EXPECT_EQ(ParseLabelSelector(bad).status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

}  // namespace
}  // namespace posbias::naming
