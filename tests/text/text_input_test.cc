// Text inputs laid out into L ids per sample (server/text/text_input.h), on a byte tokenizer whose
// ids are the bytes themselves (and <|endoftext|> = 256), so every expected id can be read off.
#include "server/text/text_input.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"

namespace posbias::text {
namespace {

// GPT-2's byte-to-character map, inverted for the 256 byte tokens.
std::string ByteChar(int b) {
  auto printable = [](int c) { return (c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF); };
  int code_point = b;
  if (!printable(b)) {
    int n = 0;
    for (int c = 0; c < b; ++c) n += printable(c) ? 0 : 1;
    code_point = 256 + n;
  }
  if (code_point < 0x80) return std::string(1, static_cast<char>(code_point));
  return {static_cast<char>(0xC0 | (code_point >> 6)), static_cast<char>(0x80 | (code_point & 0x3F))};
}

std::unique_ptr<tokenizer::Tokenizer> ByteTokenizer() {
  nlohmann::json vocab = nlohmann::json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  vocab["<|endoftext|>"] = 256;
  auto tokenizer = tokenizer::Tokenizer::FromVocabAndMerges(vocab.dump(), "#version: 0.2\n");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

std::vector<int64_t> Bytes(const std::string& text) { return {text.begin(), text.end()}; }

v1::TextInput Documents(std::initializer_list<std::string> documents) {
  v1::TextInput input;
  auto* sample = input.add_samples();
  for (const auto& document : documents) sample->add_documents(document);
  return input;
}

TEST(TextLayout, ConcatenateJoinsDocumentsWithTheEndOfSequenceTokenAndMarksWhereEachBegins) {
  const auto tokenizer = ByteTokenizer();
  auto laid_out = LayOutText(*tokenizer, Documents({"abc", "de"}), 6);
  ASSERT_TRUE(laid_out.ok()) << laid_out.status();
  ASSERT_EQ(laid_out->tokens.size(), 1u);
  EXPECT_EQ(laid_out->tokens[0], (std::vector<int64_t>{'a', 'b', 'c', 256, 'd', 'e'}));
  EXPECT_EQ(laid_out->document_starts[0], (std::vector<int64_t>{1, 5}));
}

TEST(TextLayout, ConcatenateWantsExactlyLTokensUnlessToldToCutAndTheNextTokenForLogProb) {
  const auto tokenizer = ByteTokenizer();
  auto input = Documents({"abcdefgh"});
  const auto too_many = LayOutText(*tokenizer, input, 6);
  EXPECT_EQ(too_many.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(too_many.status()), "input.text.samples[0]");
  EXPECT_EQ(LayOutText(*tokenizer, input, 9).status().code(), absl::StatusCode::kInvalidArgument) << "too few";
  input.set_truncate(true);
  auto cut = LayOutText(*tokenizer, input, 6);
  ASSERT_TRUE(cut.ok());
  EXPECT_EQ(cut->tokens[0], Bytes("abcdef"));
  auto with_next = LayOutText(*tokenizer, input, 6, /*with_next_token=*/true);
  ASSERT_TRUE(with_next.ok());
  EXPECT_EQ(with_next->tokens[0], Bytes("abcdefg")) << "L + 1 ids: the token after position L too";
}

TEST(TextLayout, FixedBoundariesCutALongDocumentAndRepeatAShortOneToFillItsSpan) {
  const auto tokenizer = ByteTokenizer();
  auto input = Documents({"abcdefgh", "xy"});
  input.set_layout(v1::TEXT_LAYOUT_FIXED_BOUNDARIES);
  input.add_boundaries(6);
  auto laid_out = LayOutText(*tokenizer, input, 10);
  ASSERT_TRUE(laid_out.ok()) << laid_out.status();
  EXPECT_EQ(laid_out->tokens[0], Bytes("abcdexyxyx"));
  EXPECT_EQ(laid_out->document_starts[0], (std::vector<int64_t>{1, 6, 8, 10})) << "each repetition starts again";
  input.set_boundaries(0, 2);
  EXPECT_EQ(ErrorFieldOf(LayOutText(*tokenizer, input, 10).status()), "input.text.boundaries[0]")
      << "a boundary needs two neighbours on each side";
}

TEST(TextLayout, SizesPastTheLimitsAreRefusedBeforeAnythingIsTokenized) {
  const auto tokenizer = ByteTokenizer();
  TextLimits limits;
  limits.max_document_bytes = 4;
  const auto refused = LayOutText(*tokenizer, Documents({"abcde"}), 5, false, limits);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "REQUEST_TOO_LARGE");
  EXPECT_EQ(ErrorAllowedOf(refused.status()), "at most 4 bytes") << "the limits table's words";
  limits.max_document_bytes = 1 << 20;
  limits.max_documents = 1;
  EXPECT_EQ(ErrorReasonOf(LayOutText(*tokenizer, Documents({"ab", "cd"}), 5, false, limits).status()), "REQUEST_TOO_LARGE");
}

}  // namespace
}  // namespace posbias::text
