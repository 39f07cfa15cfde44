// The associative-recall generator: a probe laid out by hand, the queried pair where the depth
// puts it, every pair's key distinct, the same probe for the same seed, and clear refusals.
#include "server/recall/recall_task.h"

#include <cmath>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace posbias::recall {
namespace {

// The byte-level tokenizer: one token per byte.
absl::StatusOr<std::vector<int64_t>> Bytes(std::string_view text) {
  return std::vector<int64_t>(text.begin(), text.end());
}

std::string Text(const std::vector<int64_t>& ids, size_t begin, size_t count) {
  std::string text;
  for (size_t i = begin; i < begin + count && i < ids.size(); ++i) text.push_back(static_cast<char>(ids[i]));
  return text;
}

TEST(RecallTask, AOnePairProbeAtHalfDepthIsLaidOutAsWorkedByHand) {
  // L = 16, one pair with a one-letter key, the only value "x". The query " k=" takes positions
  // 14..16, the haystack 1..13; the block " k=x " (5 tokens) starts at offset
  // round(0.5 x (13 - 5)) = 4, so the key sits at position 6 and the value at 8.
  TaskOptions options{.length = 16, .pairs = 1, .key_letters = 1, .values = "x"};
  auto probe = MakeProbe(options, 0.5, 42, Bytes);
  ASSERT_TRUE(probe.ok()) << probe.status();
  ASSERT_EQ(probe->tokens.size(), 17u);
  EXPECT_EQ(probe->pair_start, 6);
  EXPECT_EQ(probe->pair_tokens, 3);
  const std::string key = probe->key;
  ASSERT_EQ(key.size(), 1u);
  EXPECT_EQ(Text(probe->tokens, 4, 5), " " + key + "=x ");
  EXPECT_EQ(Text(probe->tokens, 13, 3), " " + key + "=");
  EXPECT_EQ(probe->tokens[16], 'x');
  EXPECT_EQ(probe->value, 'x');
  for (size_t i : {0u, 1u, 2u, 3u, 9u, 10u, 11u, 12u}) {  // Filler: letters and spaces, never "=".
    EXPECT_TRUE(probe->tokens[i] == ' ' || (probe->tokens[i] >= 'a' && probe->tokens[i] <= 'z')) << i;
  }
}

TEST(RecallTask, TheQueriedPairStartsTheHaystackAtDepthZeroAndEndsItAtDepthOne) {
  TaskOptions options{.length = 96, .pairs = 6, .key_letters = 3};
  const int64_t query = 1 + 3 + 1, block = 1 + 3 + 1 + 1 + 1;
  auto first = MakeProbe(options, 0.0, 1, Bytes);
  auto last = MakeProbe(options, 1.0, 1, Bytes);
  ASSERT_TRUE(first.ok() && last.ok());
  EXPECT_EQ(first->pair_start, 2);
  EXPECT_EQ(last->pair_start, 96 - query - block + 2);
  for (const auto* probe : {&*first, &*last}) {
    EXPECT_EQ(Text(probe->tokens, probe->pair_start - 1, 5), probe->key + "=" + std::string(1, probe->value));
    EXPECT_EQ(probe->tokens.back(), probe->value);
  }
}

TEST(RecallTask, EveryPairHasItsOwnKeyAndTheQueryNamesExactlyOne) {
  TaskOptions options{.length = 200, .pairs = 12, .key_letters = 2};
  for (uint64_t seed = 0; seed < 50; ++seed) {
    auto probe = MakeProbe(options, static_cast<double>(seed % 11) / 10.0, ProbeSeed(9, seed), Bytes);
    ASSERT_TRUE(probe.ok()) << probe.status();
    ASSERT_EQ(probe->tokens.size(), 201u);
    const std::string text = Text(probe->tokens, 0, 200);
    std::set<std::string> keys;
    int equals = 0;
    for (size_t i = 0; i < text.size(); ++i) {
      if (text[i] != '=') continue;
      ++equals;
      if (i + 1 < text.size()) keys.insert(text.substr(i - 2, 2));  // Every pair's key (the query's is last).
    }
    EXPECT_EQ(equals, 13);
    EXPECT_EQ(keys.size(), 12u) << "keys repeat in probe " << seed;
    EXPECT_EQ(text.substr(197, 3), probe->key + "=");
    EXPECT_NE(text.find(" " + probe->key + "=" + std::string(1, probe->value) + " "), std::string::npos);
  }
}

TEST(RecallTask, TheSameSeedGivesTheSameProbeAndAnotherSeedAnother) {
  TaskOptions options{.length = 64, .pairs = 4};
  auto a = MakeProbe(options, 0.3, 5, Bytes), b = MakeProbe(options, 0.3, 5, Bytes), c = MakeProbe(options, 0.3, 6, Bytes);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a->tokens, b->tokens);
  EXPECT_NE(a->tokens, c->tokens);
  EXPECT_NE(ProbeSeed(1, 0), ProbeSeed(1, 1));
}

TEST(RecallTask, ValuesAreDrawnUniformlyFromTheAlphabet) {
  TaskOptions options{.length = 32, .pairs = 1, .values = "abcd"};
  std::vector<int> counts(4, 0);
  for (uint64_t i = 0; i < 4000; ++i) {
    auto probe = MakeProbe(options, 0.5, ProbeSeed(3, i), Bytes);
    ASSERT_TRUE(probe.ok());
    ++counts[probe->value - 'a'];
  }
  for (int count : counts) EXPECT_NEAR(count, 1000, 5 * std::sqrt(4000 * 0.25 * 0.75)) << "a value's count";
}

TEST(RecallTask, RefusalsNameWhatIsWrongAndWhatIsAllowed) {
  auto short_context = MakeProbe({.length = 20, .pairs = 4}, 0.5, 1, Bytes);
  EXPECT_EQ(short_context.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(short_context.status().message().find("a longer context, or fewer pairs"), std::string::npos)
      << short_context.status();
  auto equals = MakeProbe({.length = 64, .values = "a=b"}, 0.5, 1, Bytes);
  EXPECT_NE(equals.status().message().find("other than \"=\""), std::string::npos) << equals.status();
  auto depth = MakeProbe({.length = 64}, 1.5, 1, Bytes);
  EXPECT_NE(depth.status().message().find("[0, 1]"), std::string::npos) << depth.status();
  auto too_many = MakeProbe({.length = 4096, .pairs = 20, .key_letters = 1}, 0.5, 1, Bytes);
  EXPECT_NE(too_many.status().message().find("distinct keys"), std::string::npos) << too_many.status();
  const Tokenize two_per_letter = [](std::string_view text) -> absl::StatusOr<std::vector<int64_t>> {
    std::vector<int64_t> ids;
    for (char c : text) ids.insert(ids.end(), {c, c});
    return ids;
  };
  auto split = MakeProbe({.length = 128}, 0.5, 1, two_per_letter);
  EXPECT_NE(split.status().message().find("one token each"), std::string::npos) << split.status();
}

}  // namespace
}  // namespace posbias::recall
