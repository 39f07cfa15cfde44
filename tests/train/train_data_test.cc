// The trainer's torch-free parts: the byte-level tokenizer through the tokenizer room, the corpus
// reader and split, the learning-rate schedule and the per-position loss weights.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "server/tokenizer/tokenizer.h"
#include "server/train/byte_tokenizer.h"
#include "server/train/corpus.h"
#include "server/train/lr_schedule.h"
#include "server/train/position_weights.h"
#include "tests/train/scratch_dir.h"

namespace posbias::train {
namespace {

namespace fs = std::filesystem;

ScratchDir FreshDir(const std::string& name) { return ScratchDir("train_data", name); }

void Write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

std::unique_ptr<tokenizer::Tokenizer> ByteTokenizer() {
  const auto dir = FreshDir("tokenizer");
  EXPECT_TRUE(WriteByteLevelTokenizer(dir.string()).ok());
  auto tokenizer = tokenizer::Tokenizer::FromDirectory(dir.string());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

TEST(ByteTokenizer, SymbolsAreGpt2BytesToUnicode) {
  EXPECT_EQ(ByteLevelSymbol('A'), "A");
  EXPECT_EQ(ByteLevelSymbol(' '), "\xC4\xA0");   // U+0120 'Ġ'.
  EXPECT_EQ(ByteLevelSymbol(0), "\xC4\x80");     // U+0100.
  EXPECT_EQ(ByteLevelSymbol('\n'), "\xC4\x8A");  // U+010A 'Ċ'.
  EXPECT_EQ(ByteLevelSymbol(0xAD), "\xC5\x83");  // U+0143, the last of the 68 shifted bytes.
  EXPECT_EQ(ByteLevelSymbol(0xE9), "\xC3\xA9");  // Latin-1 'é' stands for itself.
  std::set<std::string> symbols;
  for (int byte = 0; byte < 256; ++byte) symbols.insert(ByteLevelSymbol(static_cast<uint8_t>(byte)));
  EXPECT_EQ(symbols.size(), 256u);
}

TEST(ByteTokenizer, LoadsInTheTokenizerRoomAndEncodesUtf8Bytes) {
  auto tokenizer = ByteTokenizer();
  ASSERT_NE(tokenizer, nullptr);
  EXPECT_EQ(tokenizer->vocab_size(), kByteLevelVocabSize);
  EXPECT_EQ(tokenizer->eos_token_id(), kByteLevelEosId);
  const std::string text = "h\xC3\xA9llo";  // "héllo".
  auto encoding = tokenizer->Encode(text);
  ASSERT_TRUE(encoding.ok()) << encoding.status();
  EXPECT_EQ(encoding->ids, (std::vector<int64_t>{'h', 0xC3, 0xA9, 'l', 'l', 'o'}));
  auto decoded = tokenizer->Decode(encoding->ids);
  ASSERT_TRUE(decoded.ok());
  EXPECT_EQ(*decoded, text);
  auto with_eos = tokenizer->Encode(" a<|endoftext|>\n");
  ASSERT_TRUE(with_eos.ok());
  EXPECT_EQ(with_eos->ids, (std::vector<int64_t>{' ', 'a', kByteLevelEosId, '\n'}));
  // Every ASCII byte, then characters of two, three and four bytes (valid UTF-8: the tokenizer
  // room repairs invalid input to U+FFFD, as Hugging Face does).
  std::string text_bytes;
  for (int byte = 0; byte < 128; ++byte) text_bytes.push_back(static_cast<char>(byte));
  text_bytes += "\xC3\xA9\xE2\x82\xAC\xF0\x9F\x98\x80";  // é € 😀
  auto bytes = tokenizer->Encode(text_bytes);
  ASSERT_TRUE(bytes.ok());
  ASSERT_EQ(bytes->ids.size(), text_bytes.size());
  for (size_t i = 0; i < text_bytes.size(); ++i) EXPECT_EQ(bytes->ids[i], static_cast<uint8_t>(text_bytes[i])) << i;
}

TEST(Corpus, ReadsTextJsonlAndDirectoriesInNameOrder) {
  const auto dir = FreshDir("corpus");
  fs::create_directories(dir / "docs");
  Write(dir / "docs" / "b.txt", "bb");
  Write(dir / "docs" / "a.jsonl", "{\"text\": \"a1\"}\n\n{\"text\": \"a2<|endoftext|>\"}\n");
  Write(dir / "c.txt", "c");
  auto files = ListDocumentFiles({(dir / "docs").string(), (dir / "c.txt").string()});
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->size(), 3u);
  EXPECT_EQ(fs::path((*files)[0]).filename(), "a.jsonl");
  auto tokenizer = ByteTokenizer();
  auto stream = TokenizeFiles(*files, *tokenizer, kByteLevelEosId);
  ASSERT_TRUE(stream.ok()) << stream.status();
  EXPECT_EQ(stream->documents, 4);
  const std::string expected = "a1#a2<|endoftext|>#bb#c#";  // '#' marks the separators; the text's EOS is plain text.
  ASSERT_EQ(stream->tokens.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(stream->tokens[i], expected[i] == '#' ? kByteLevelEosId : expected[i]) << i;
  }
}

TEST(Corpus, ErrorsNameTheFlagAndTheLine) {
  const auto dir = FreshDir("corpus_errors");
  fs::create_directories(dir / "empty");
  auto none = ListDocumentFiles({(dir / "empty").string()});
  EXPECT_EQ(none.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(none.status().message().find("--data"), std::string::npos);
  EXPECT_EQ(ListDocumentFiles({(dir / "missing").string()}).status().code(), absl::StatusCode::kNotFound);
  Write(dir / "bad.jsonl", "{\"text\": \"ok\"}\n{\"title\": 1}\n");
  auto stream = TokenizeFiles({(dir / "bad.jsonl").string()}, *ByteTokenizer(), kByteLevelEosId);
  EXPECT_EQ(stream.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(stream.status().message().find("bad.jsonl:2"), std::string::npos) << stream.status();
}

TEST(Corpus, SplitIsSeededDisjointAndComplete) {
  const auto split = SplitSequences(/*stream_size=*/1001, /*length=*/10, 0.1, /*seed=*/7);
  EXPECT_EQ(split.eval.size(), 10u);
  EXPECT_EQ(split.train.size(), 90u);
  std::set<int64_t> all(split.train.begin(), split.train.end());
  all.insert(split.eval.begin(), split.eval.end());
  EXPECT_EQ(all.size(), 100u);
  EXPECT_EQ(SplitSequences(1001, 10, 0.1, 7).eval, split.eval);
  EXPECT_NE(SplitSequences(1001, 10, 0.1, 8).eval, split.eval);
  EXPECT_EQ(SplitSequences(25, 10, 0.05, 7).eval.size(), 1u);  // At least one held out.
  EXPECT_TRUE(SplitSequences(1001, 10, 0.0, 7).eval.empty());
}

TEST(Corpus, UnigramEntropyCountsTargets) {
  // Sequences of length 2 over the stream; targets of sequence 0 are tokens 1, 2 and of 1: 3, 4.
  const std::vector<int64_t> tokens{9, 1, 1, 2, 3};
  EXPECT_NEAR(UnigramEntropyNats(tokens, {0}, 2), 0.0, 1e-15);
  EXPECT_NEAR(UnigramEntropyNats(tokens, {1}, 2), std::log(2.0), 1e-15);
  EXPECT_NEAR(UnigramEntropyNats(tokens, {0, 1}, 2), -(0.5 * std::log(0.5) + 2 * 0.25 * std::log(0.25)), 1e-15);
}

TEST(LrSchedule, WarmupThenCosineToTheFloor) {
  const LrSchedule schedule{/*peak_lr=*/1e-3, /*warmup_steps=*/10, /*total_steps=*/110, /*min_lr_ratio=*/0.1};
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 1), 1e-4);
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 5), 5e-4);
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 10), 1e-3);
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 60), 1e-3 * (0.1 + 0.9 * 0.5));  // Half way: cos = 0.
  EXPECT_NEAR(LearningRate(schedule, 35), 1e-3 * (0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI / 4))), 1e-18);
  EXPECT_DOUBLE_EQ(LearningRate(schedule, 110), 1e-4);
  const LrSchedule no_warmup{2.0, 0, 4, 0.0};
  EXPECT_DOUBLE_EQ(LearningRate(no_warmup, 4), 0.0);
  EXPECT_DOUBLE_EQ(LearningRate(no_warmup, 2), 1.0);
}

// Row L of N^H, N = (1 - alpha) I + alpha M with M_ij = 1/i for j <= i: by matrix products.
std::vector<double> RoutingRowByProducts(size_t length, int layers, double alpha) {
  std::vector<double> row(length, 0.0), next(length, 0.0);
  row.back() = 1.0;
  for (int layer = 0; layer < layers; ++layer) {
    std::fill(next.begin(), next.end(), 0.0);
    for (size_t i = 0; i < length; ++i) {
      next[i] += (1 - alpha) * row[i];
      for (size_t j = 0; j <= i; ++j) next[j] += alpha * row[i] / static_cast<double>(i + 1);
    }
    row.swap(next);
  }
  return row;
}

TEST(PositionWeights, InverseRhoIsTheNormalizedInverseRoutingRow) {
  PositionWeightOptions options;
  options.weighting = PositionWeighting::kInverseRho;
  options.rho_alpha = 0.3;
  auto weights = PositionLossWeights(options, 12, 3);
  ASSERT_TRUE(weights.ok()) << weights.status();
  const auto row = RoutingRowByProducts(12, 3, 0.3);
  double inverse_sum = 0;
  for (const double rho : row) inverse_sum += 1 / rho;
  for (int t = 0; t < 12; ++t) EXPECT_NEAR((*weights)[t], 12 / row[t] / inverse_sum, 1e-12) << t;
  // The middle, routed weakly at initialization, weighs most; the last position least.
  EXPECT_GT((*weights)[6], (*weights)[0]);
  EXPECT_LT((*weights)[11], (*weights)[0]);
}

TEST(PositionWeights, MiddleOversamplingAndExplicitWeights) {
  PositionWeightOptions options;
  auto plain = PositionLossWeights(options, 10, 2);
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(*plain, std::vector<double>(10, 1.0));
  options.middle_oversampling = 3;
  auto middle = PositionLossWeights(options, 10, 2);
  ASSERT_TRUE(middle.ok());
  for (int t = 0; t < 10; ++t) EXPECT_NEAR((*middle)[t], (t == 0 || t == 9 ? 1.0 : 3.0) / 2.6, 1e-15) << t;
  options.explicit_weights = {0, 1, 1, 1, 1, 1, 1, 1, 1, 2};
  auto both = PositionLossWeights(options, 10, 2);
  ASSERT_TRUE(both.ok());
  // Explicit 0, 1 x 8, 2 (mean 1) times F = 3 on positions 1..8: 0, 3 x 8, 2, renormalized by 2.6.
  EXPECT_NEAR((*both)[0], 0.0, 1e-15);
  EXPECT_NEAR((*both)[4], 3 / 2.6, 1e-15);
  EXPECT_NEAR((*both)[9], 2 / 2.6, 1e-15);
  EXPECT_FALSE(PositionLossWeights(options, 11, 2).ok());  // Not L numbers.
}

TEST(PositionWeights, BadValuesNameTheirFlag) {
  const auto message = [](PositionWeightOptions options) {
    return std::string(ValidatePositionWeightOptions(options).message());
  };
  PositionWeightOptions alpha;
  alpha.rho_alpha = 0;
  EXPECT_NE(message(alpha).find("--rho-alpha"), std::string::npos);
  PositionWeightOptions factor;
  factor.middle_oversampling = 0.5;
  EXPECT_NE(message(factor).find("--middle-oversampling"), std::string::npos);
  PositionWeightOptions both;
  both.weighting = PositionWeighting::kInverseRho;
  both.explicit_weights = {1, 2};
  EXPECT_NE(message(both).find("--position-weights"), std::string::npos);
  PositionWeightOptions negative;
  negative.explicit_weights = {1, -2};
  EXPECT_NE(message(negative).find("--position-weights[1]"), std::string::npos);
  EXPECT_FALSE(ParsePositionWeighting("rho").ok());
  EXPECT_EQ(*ParsePositionWeighting("inverse-rho"), PositionWeighting::kInverseRho);
}

}  // namespace
}  // namespace posbias::train
