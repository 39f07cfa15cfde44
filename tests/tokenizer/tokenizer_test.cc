// Unit tests of the tokenizer room on tiny hand-written vocabularies whose outcomes can be worked
// out by hand. Byte-level vocabularies here give each byte b the id b (GPT-2's bytes_to_unicode
// table, rebuilt below independently of the room's own), so a byte token's id is its byte.
#include "server/tokenizer/tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"

namespace posbias::tokenizer {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using Offsets = std::vector<std::pair<size_t, size_t>>;
using nlohmann::json;

// ---------------------------------------------------------------------------------------------
// Helpers.

// The byte-level character of byte b (GPT-2's bytes_to_unicode), as UTF-8.
std::string ByteChar(int b) {
  const bool printable =
      (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
  int code_point = b;
  if (!printable) {
    int n = 0;
    for (int c = 0; c < b; ++c) {
      if (!((c >= '!' && c <= '~') || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF))) ++n;
    }
    code_point = 256 + n;
  }
  if (code_point < 0x80) return std::string(1, static_cast<char>(code_point));
  return {static_cast<char>(0xC0 | (code_point >> 6)),
          static_cast<char>(0x80 | (code_point & 0x3F))};
}

// A vocabulary of the 256 bytes (id = byte) plus `extra` tokens from id 256 on.
json ByteVocab(const std::vector<std::string>& extra = {}) {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[ByteChar(b)] = b;
  for (size_t i = 0; i < extra.size(); ++i) vocab[extra[i]] = 256 + i;
  return vocab;
}

// The GPT-2-style tiny tokenizer: "hello" and " world" are one token each.
const std::vector<std::string> kHelloTokens = {"he", "ll",   "hell",  "hello",  "Ġw",
                                               "or", "Ġwor", "Ġworl", "Ġworld", "<|endoftext|>"};
const std::string kHelloMerges =
    "#version: 0.2\nh e\nl l\nhe ll\nhell o\nĠ w\no r\nĠw or\nĠwor l\nĠworl d\n";
constexpr int64_t kHello = 259, kWorld = 264, kEndOfText = 265;

std::unique_ptr<Tokenizer> HelloTokenizer() {
  auto tokenizer = Tokenizer::FromVocabAndMerges(ByteVocab(kHelloTokens).dump(), kHelloMerges);
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return *std::move(tokenizer);
}

// A tokenizer.json around a byte vocabulary, with Qwen2's pre-tokenizer unless told otherwise.
json TokenizerJson(const std::vector<std::string>& extra, const json& merges) {
  json file;
  file["version"] = "1.0";
  file["normalizer"] = nullptr;
  file["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern",
          {{"Regex",
            R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}}},
         {"behavior", "Isolated"},
         {"invert", false}},
        {{"type", "ByteLevel"},
         {"add_prefix_space", false},
         {"trim_offsets", false},
         {"use_regex", false}}}}};
  file["decoder"] = {{"type", "ByteLevel"}};
  file["post_processor"] = nullptr;
  file["added_tokens"] = json::array();
  file["model"] = {
      {"type", "BPE"}, {"vocab", ByteVocab(extra)}, {"merges", merges}, {"unk_token", nullptr}};
  return file;
}

std::unique_ptr<Tokenizer> FromJson(const json& file) {
  auto tokenizer = Tokenizer::FromTokenizerJson(file.dump());
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.status();
  return tokenizer.ok() ? *std::move(tokenizer) : nullptr;
}

Encoding EncodeOk(const Tokenizer& tokenizer, std::string_view text,
                  const EncodeOptions& options = {}) {
  auto encoding = tokenizer.Encode(text, options);
  EXPECT_TRUE(encoding.ok()) << encoding.status();
  return encoding.ok() ? *encoding : Encoding{};
}

std::vector<int64_t> Bytes(std::string_view text) {
  std::vector<int64_t> ids;
  for (const char c : text) ids.push_back(static_cast<uint8_t>(c));
  return ids;
}

class TempDir {
 public:
  TempDir() {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    path_ = std::filesystem::path(::testing::TempDir()) /
            absl::StrCat("tokenizer_", info->test_suite_name(), "_", info->name(), "_", ::getpid());
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  void Write(const std::string& name, const std::string& bytes) const {
    std::ofstream(path_ / name, std::ios::binary) << bytes;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

// ---------------------------------------------------------------------------------------------
// BPE merges.

TEST(ByteLevelBpe, MergesAWordIntoItsVocabularyToken) {
  EXPECT_THAT(EncodeOk(*HelloTokenizer(), "hello").ids, ElementsAre(kHello));
}

TEST(ByteLevelBpe, ASpaceJoinsTheWordAfterIt) {
  const Encoding encoding = EncodeOk(*HelloTokenizer(), "hello world");
  EXPECT_THAT(encoding.ids, ElementsAre(kHello, kWorld));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 5}, std::pair<size_t, size_t>{5, 11}));
}

TEST(ByteLevelBpe, UnmergeableBytesStayByteTokens) {
  EXPECT_THAT(EncodeOk(*HelloTokenizer(), "hex").ids, ElementsAre(256, 'x'));
}

TEST(ByteLevelBpe, TheLowerRankedMergeWins) {
  // "abc" with merges [a b, b c] becomes ab|c; with [b c, a b], a|bc.
  const json ab_first = TokenizerJson({"ab", "bc"}, {"a b", "b c"});
  const json bc_first = TokenizerJson({"ab", "bc"}, {"b c", "a b"});
  EXPECT_THAT(EncodeOk(*FromJson(ab_first), "abc").ids, ElementsAre(256, 'c'));
  EXPECT_THAT(EncodeOk(*FromJson(bc_first), "abc").ids, ElementsAre('a', 257));
}

TEST(ByteLevelBpe, MergesMayBeWrittenAsPairs) {
  const json pairs =
      TokenizerJson({"ab", "bc"}, json::array({json::array({"b", "c"}), json::array({"a", "b"})}));
  EXPECT_THAT(EncodeOk(*FromJson(pairs), "abc").ids, ElementsAre('a', 257));
}

TEST(ByteLevelBpe, EqualRanksMergeLeftmostFirst) {
  // "aaa" with the one merge a a: the left pair merges, the last a stays.
  EXPECT_THAT(EncodeOk(*FromJson(TokenizerJson({"aa"}, {"a a"})), "aaa").ids,
              ElementsAre(256, 'a'));
}

TEST(ByteLevelBpe, AHundredThousandCharacterRunCompletes) {
  // Quadratic merging would take minutes here (and time the test out); the heap takes milliseconds.
  const auto tokenizer = FromJson(TokenizerJson({"aa", "aaaa"}, {"a a", "aa aa"}));
  const Encoding letters = EncodeOk(*tokenizer, std::string(100000, 'a'));
  ASSERT_EQ(letters.ids.size(), 25000u);
  EXPECT_EQ(letters.ids.front(), 257);
  EXPECT_EQ(letters.byte_offsets.back(), (std::pair<size_t, size_t>{99996, 100000}));
  EXPECT_EQ(EncodeOk(*tokenizer, std::string(100000, ' ')).ids.size(), 100000u);
  std::string cjk;
  for (int i = 0; i < 100000; ++i) cjk += "\xE4\xB8\xAD";  // 中
  EXPECT_EQ(EncodeOk(*tokenizer, cjk).ids.size(), 300000u);
  EXPECT_EQ(EncodeOk(*HelloTokenizer(), std::string(100000, 'a')).ids.size(), 100000u);
}

// ---------------------------------------------------------------------------------------------
// Pre-tokenizers.

TEST(PreTokenizer, QwenContractionsIgnoreCaseAndGpt2sDoNot) {
  // Qwen2's (?i:'t) keeps "'T" one piece, so its merge applies; GPT-2's 't does not match "'T".
  const std::vector<std::string> extra = {"'T"};
  const auto qwen = FromJson(TokenizerJson(extra, {"' T"}));
  EXPECT_THAT(EncodeOk(*qwen, "DON'T").ids, ElementsAre('D', 'O', 'N', 256));
  auto gpt2 = Tokenizer::FromVocabAndMerges(ByteVocab(extra).dump(), "' T\n");
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_THAT(EncodeOk(**gpt2, "DON'T").ids, ElementsAre('D', 'O', 'N', '\'', 'T'));
}

TEST(PreTokenizer, QwenSplitsDigitsOneByOne) {
  const auto qwen = FromJson(TokenizerJson({"12"}, {"1 2"}));
  EXPECT_THAT(EncodeOk(*qwen, "12").ids, ElementsAre('1', '2'));
  auto gpt2 = Tokenizer::FromVocabAndMerges(ByteVocab({"12"}).dump(), "1 2\n");
  ASSERT_TRUE(gpt2.ok());
  EXPECT_THAT(EncodeOk(**gpt2, "12").ids, ElementsAre(256));
}

TEST(PreTokenizer, WhiteSpaceIsUnicodeWhiteSpace) {
  // U+180E (Mongolian vowel separator) is no White_Space since Unicode 6.3, though PCRE2's own \s
  // still matches it: GPT-2's regex must keep "\u180E!" one piece, so its three merges apply.
  const std::string e1a0 = ByteChar(0xE1) + ByteChar(0xA0), separator = e1a0 + ByteChar(0x8E);
  const std::string merges = ByteChar(0xE1) + " " + ByteChar(0xA0) + "\n" + e1a0 + " " +
                             ByteChar(0x8E) + "\n" + separator + " !\n";
  auto gpt2 =
      Tokenizer::FromVocabAndMerges(ByteVocab({e1a0, separator, separator + "!"}).dump(), merges);
  ASSERT_TRUE(gpt2.ok()) << gpt2.status();
  EXPECT_THAT(EncodeOk(**gpt2, "\xE1\xA0\x8E!").ids, ElementsAre(258));
}

// ---------------------------------------------------------------------------------------------
// Added and special tokens.

TEST(AddedTokens, SpecialTokensSplitTheTextFirst) {
  const Encoding encoding = EncodeOk(*HelloTokenizer(), "hello<|endoftext|> world");
  EXPECT_THAT(encoding.ids, ElementsAre(kHello, kEndOfText, kWorld));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 5}, std::pair<size_t, size_t>{5, 18},
                          std::pair<size_t, size_t>{18, 24}));
}

TEST(AddedTokens, SpecialTokensAsTextAreTokenizedLikeAnyText) {
  const Encoding encoding =
      EncodeOk(*HelloTokenizer(), "<|endoftext|>", {.special_tokens_as_text = true});
  EXPECT_EQ(encoding.ids, Bytes("<|endoftext|>"));
}

TEST(AddedTokens, TheLongestAddedTokenWins) {
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<a>"}, {"special", true}},
                          {{"id", 301}, {"content", "<a><b>"}, {"special", true}}};
  EXPECT_THAT(EncodeOk(*FromJson(file), "x<a><b><a>").ids, ElementsAre('x', 301, 300));
}

TEST(AddedTokens, LstripSwallowsTheWhiteSpaceBeforeIt) {
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {
      {{"id", 300}, {"content", "<mask>"}, {"special", true}, {"lstrip", true}}};
  const Encoding encoding = EncodeOk(*FromJson(file), "a  <mask>");
  EXPECT_THAT(encoding.ids, ElementsAre('a', 300));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 9}));
}

TEST(AddedTokens, SingleWordTokensAreRefused) {
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<w>"}, {"single_word", true}}};
  const auto tokenizer = Tokenizer::FromTokenizerJson(file.dump());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("single_word"));
}

// ---------------------------------------------------------------------------------------------
// Offsets, invalid UTF-8 and NFC.

TEST(Offsets, NameTheBytesOfEachTokenAlsoInsideACharacter) {
  // 中 is three bytes, three byte tokens here: each names its own byte.
  const Encoding encoding = EncodeOk(*HelloTokenizer(), "\xE4\xB8\xAD");
  EXPECT_EQ(encoding.ids, Bytes("\xE4\xB8\xAD"));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 2},
                          std::pair<size_t, size_t>{2, 3}));
}

TEST(InvalidUtf8, EachMaximalSubpartBecomesOneReplacementCharacter) {
  // A stray continuation byte, a truncated three-byte sequence, an overlong two-byte form, a
  // surrogate, each as the WHATWG decoder (and Node) repair them.
  const auto tokenizer = HelloTokenizer();
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(EncodeOk(*tokenizer, "\x80").ids, Bytes(fffd));
  EXPECT_EQ(EncodeOk(*tokenizer, "\xE2\x82").ids, Bytes(fffd));
  EXPECT_EQ(EncodeOk(*tokenizer, "\xC0\xAF").ids, Bytes(fffd + fffd));
  EXPECT_EQ(EncodeOk(*tokenizer, "\xED\xA0\x80").ids, Bytes(fffd + fffd + fffd));
  EXPECT_EQ(EncodeOk(*tokenizer, "\xF0\x9F\x98").ids, Bytes(fffd));
}

TEST(InvalidUtf8, OffsetsPointAtTheReplacedBytes) {
  // "a", then E2 82 (a truncated €) replaced by one U+FFFD, then "b".
  const Encoding encoding = EncodeOk(*HelloTokenizer(),
                                     "a\xE2\x82"
                                     "b");
  EXPECT_EQ(encoding.ids, Bytes("a\xEF\xBF\xBD"
                                "b"));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 3},
                          std::pair<size_t, size_t>{1, 3}, std::pair<size_t, size_t>{1, 3},
                          std::pair<size_t, size_t>{3, 4}));
}

TEST(Nfc, ComposesAndKeepsOffsetsOnTheInput) {
  json file = TokenizerJson({}, json::array());
  file["normalizer"] = {{"type", "NFC"}};
  const auto tokenizer = FromJson(file);
  // "xe" + U+0301 → "xé": x keeps [0, 1); both bytes of é name the three input bytes [1, 4).
  const Encoding encoding = EncodeOk(*tokenizer, "xe\xCC\x81");
  EXPECT_EQ(encoding.ids, Bytes("x\xC3\xA9"));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 4},
                          std::pair<size_t, size_t>{1, 4}));
}

TEST(Nfc, LeavesComposedTextByteForByte) {
  json file = TokenizerJson({}, json::array());
  file["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}}}};
  const Encoding encoding = EncodeOk(*FromJson(file), "\xC3\xA9");
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 2}));
}

TEST(Nfkc, FoldsCompatibilityCharacters) {
  json file = TokenizerJson({}, json::array());
  file["normalizer"] = {{"type", "NFKC"}};
  EXPECT_EQ(EncodeOk(*FromJson(file), "\xEF\xAC\x81").ids, Bytes("fi"));  // U+FB01 ﬁ
}

// ---------------------------------------------------------------------------------------------
// Decoding.

TEST(Decode, RoundTripsValidText) {
  const auto tokenizer = HelloTokenizer();
  const std::string text = "hello world, 中文 and 👩‍💻 e\xCC\x81 \t\n  <|endoftext|>x";
  const auto decoded = tokenizer->Decode(EncodeOk(*tokenizer, text).ids);
  ASSERT_TRUE(decoded.ok()) << decoded.status();
  EXPECT_EQ(*decoded, text);
}

TEST(Decode, RepairsACharacterTheIdsCut) {
  // The first two bytes of 中 alone decode to one U+FFFD.
  EXPECT_EQ(*HelloTokenizer()->Decode({0xE4, 0xB8, 'x'}), "\xEF\xBF\xBDx");
}

TEST(Decode, AnUnknownIdIsAnInvalidArgumentNamingIt) {
  const auto decoded = HelloTokenizer()->Decode({kHello, 266});
  EXPECT_EQ(decoded.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorFieldOf(decoded.status()), "ids[1]");
  EXPECT_EQ(ErrorValueOf(decoded.status()), "266");
  EXPECT_THAT(decoded.status().message(), HasSubstr("[0, 266)"));
  EXPECT_EQ(HelloTokenizer()->Decode({-1}).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(Decode, AHoleInTheIdsIsNoToken) {
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<x>"}, {"special", true}}};
  const auto tokenizer = FromJson(file);
  EXPECT_EQ(tokenizer->vocab_size(), 301);
  EXPECT_EQ(tokenizer->Decode({299}).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(*tokenizer->Decode({300}), "<x>");
}

// ---------------------------------------------------------------------------------------------
// End of sequence, sizes and descriptions.

TEST(EndOfSequence, IsEndOfTextForGpt2) { EXPECT_EQ(HelloTokenizer()->eos_token_id(), kEndOfText); }

TEST(EndOfSequence, IsImEndWhenThatIsTheOnlyCandidate) {
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<|im_start|>"}, {"special", true}},
                          {{"id", 301}, {"content", "<|im_end|>"}, {"special", true}}};
  EXPECT_EQ(FromJson(file)->eos_token_id(), 301);
}

TEST(EndOfSequence, IsNoneWithoutACandidate) {
  EXPECT_EQ(FromJson(TokenizerJson({}, json::array()))->eos_token_id(), std::nullopt);
}

TEST(EndOfSequence, TokenizerConfigNamesIt) {
  TempDir dir;
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<|endoftext|>"}, {"special", true}},
                          {{"id", 301}, {"content", "<|im_end|>"}, {"special", true}}};
  dir.Write("tokenizer.json", file.dump());
  auto tokenizer = Tokenizer::FromDirectory(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->eos_token_id(), 300);
  dir.Write("tokenizer_config.json", R"({"eos_token": {"content": "<|im_end|>"}})");
  EXPECT_EQ((*Tokenizer::FromDirectory(dir.path()))->eos_token_id(), 301);
}

TEST(BeginningOfSequence, IsNoneForGpt2AndTheBeginOfTextTokenWhereThereIsOne) {
  EXPECT_EQ(HelloTokenizer()->bos_token_id(), std::nullopt);
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", true}},
                          {{"id", 301}, {"content", "<|begin_of_text|>"}, {"special", true}}};
  EXPECT_EQ(FromJson(file)->bos_token_id(), 301) << "<|begin_of_text|> is looked for first";
}

TEST(BeginningOfSequence, TokenizerConfigNamesIt) {
  TempDir dir;
  json file = TokenizerJson({}, json::array());
  file["added_tokens"] = {{{"id", 300}, {"content", "<s>"}, {"special", true}},
                          {{"id", 301}, {"content", "<bos>"}, {"special", true}}};
  dir.Write("tokenizer.json", file.dump());
  EXPECT_EQ((*Tokenizer::FromDirectory(dir.path()))->bos_token_id(), 300);
  dir.Write("tokenizer_config.json", R"({"bos_token": "<bos>", "eos_token": "<s>"})");
  auto tokenizer = Tokenizer::FromDirectory(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_EQ((*tokenizer)->bos_token_id(), 301);
  EXPECT_EQ((*tokenizer)->eos_token_id(), 300);
}

TEST(Description, SaysWhatKindItIs) {
  EXPECT_THAT(HelloTokenizer()->description(), HasSubstr("vocab.json + merges.txt"));
  EXPECT_THAT(FromJson(TokenizerJson({}, json::array()))->description(),
              HasSubstr("byte-level BPE from tokenizer.json (256 tokens, 0 merges, 0 added tokens; "
                        "normalizer none; "
                        "pre-tokenizer Split+ByteLevel)"));
}

// ---------------------------------------------------------------------------------------------
// SentencePiece-style BPE (Llama 2, Mistral): characters, "▁" for spaces, <0xNN> byte fallback.

// Ids: <unk> 0, <s> 1, </s> 2, <0x00>..<0xFF> 3..258, then the characters and merges below.
constexpr int64_t kUnk = 0, kBos = 1, kEos = 2, kSpace = 259, kH = 260, kE = 261, kL = 262,
                  kO = 263, kD = 264, kSpaceH = 265, kEl = 266, kSpaceHel = 267, kLo = 268,
                  kSpaceHello = 269, kTwoSpaces = 270, kDSpace = 271;
constexpr int64_t ByteToken(int b) { return 3 + b; }

// Llama 2's "legacy" layout (and Mistral's): Prepend "▁", Replace " " → "▁", no pre-tokenizer.
json SentencePieceJson() {
  json vocab = {{"<unk>", kUnk}, {"<s>", kBos}, {"</s>", kEos}};
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    vocab[name] = ByteToken(b);
  }
  const std::vector<std::pair<std::string, int64_t>> tokens = {
      {"▁", kSpace}, {"h", kH},         {"e", kE},          {"l", kL},
      {"o", kO},     {"d", kD},         {"▁h", kSpaceH},    {"el", kEl},
      {"▁hel", kSpaceHel}, {"lo", kLo}, {"▁hello", kSpaceHello}, {"▁▁", kTwoSpaces},
      {"d▁", kDSpace}};
  for (const auto& [token, id] : tokens) vocab[token] = id;
  json file;
  file["version"] = "1.0";
  file["added_tokens"] = json::array();
  for (const auto& [content, id] : {std::pair{"<unk>", kUnk}, {"<s>", kBos}, {"</s>", kEos}}) {
    file["added_tokens"].push_back({{"id", id}, {"content", content}, {"special", true},
                                    {"normalized", false}, {"lstrip", false}, {"rstrip", false}});
  }
  file["normalizer"] = {{"type", "Sequence"},
                        {"normalizers",
                         {{{"type", "Prepend"}, {"prepend", "▁"}},
                          {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "▁"}}}}};
  file["pre_tokenizer"] = nullptr;
  file["decoder"] = {{"type", "Sequence"},
                     {"decoders",
                      {{{"type", "Replace"}, {"pattern", {{"String", "▁"}}}, {"content", " "}},
                       {{"type", "ByteFallback"}},
                       {{"type", "Fuse"}},
                       {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}}}};
  file["model"] = {{"type", "BPE"},
                   {"vocab", vocab},
                   {"merges", {"▁ h", "e l", "▁h el", "l o", "▁hel lo", "▁ ▁", "d ▁"}},
                   {"unk_token", "<unk>"},
                   {"byte_fallback", true},
                   {"fuse_unk", true}};
  return file;
}

// The newer layout: no normalizer, a Metaspace pre-tokenizer with `scheme` and `split`.
json MetaspaceJson(const std::string& scheme, bool split) {
  json file = SentencePieceJson();
  file["normalizer"] = nullptr;
  file["pre_tokenizer"] = {
      {"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", scheme}, {"split", split}};
  return file;
}

TEST(SentencePiece, AWordGetsASpaceInFrontAndMerges) {
  const Encoding encoding = EncodeOk(*FromJson(SentencePieceJson()), "hello");
  EXPECT_THAT(encoding.ids, ElementsAre(kSpaceHello));
  EXPECT_THAT(encoding.byte_offsets, ElementsAre(std::pair<size_t, size_t>{0, 5}));
}

TEST(SentencePiece, ALeadingSpaceIsASecondSpaceAndThePrependedOneBelongsToTheFirstCharacter) {
  const Encoding encoding = EncodeOk(*FromJson(SentencePieceJson()), " hello");
  EXPECT_THAT(encoding.ids, ElementsAre(kSpace, kSpaceHello));
  EXPECT_THAT(encoding.byte_offsets, ElementsAre(std::pair<size_t, size_t>{0, 1},
                                                 std::pair<size_t, size_t>{0, 6}));
}

TEST(SentencePiece, RepeatedSpacesMergeIntoTheirTokenBeforeALaterRankedMerge) {
  // "▁d▁▁d": "▁ ▁" (rank 5) goes before "d ▁" (rank 6).
  EXPECT_THAT(EncodeOk(*FromJson(SentencePieceJson()), "d  d").ids,
              ElementsAre(kSpace, kD, kTwoSpaces, kD));
}

TEST(SentencePiece, ACharacterOutsideTheVocabularyFallsBackToItsBytes) {
  const Encoding encoding = EncodeOk(*FromJson(SentencePieceJson()), "h\xC3\xA9\nh");
  EXPECT_THAT(encoding.ids, ElementsAre(kSpaceH, ByteToken(0xC3), ByteToken(0xA9),
                                        ByteToken('\n'), kH));
  EXPECT_THAT(encoding.byte_offsets,
              ElementsAre(std::pair<size_t, size_t>{0, 1}, std::pair<size_t, size_t>{1, 2},
                          std::pair<size_t, size_t>{2, 3}, std::pair<size_t, size_t>{3, 4},
                          std::pair<size_t, size_t>{4, 5}));
}

TEST(SentencePiece, WithoutByteFallbackUnknownCharactersAreOneFusedUnknownToken) {
  json file = SentencePieceJson();
  file["model"]["byte_fallback"] = false;
  EXPECT_THAT(EncodeOk(*FromJson(file), "h\xC3\xA9\xC3\xA9h").ids, ElementsAre(kSpaceH, kUnk, kH));
  file["model"]["fuse_unk"] = false;
  EXPECT_THAT(EncodeOk(*FromJson(file), "h\xC3\xA9\xC3\xA9h").ids,
              ElementsAre(kSpaceH, kUnk, kUnk, kH));
}

TEST(SentencePiece, WithoutAnUnknownTokenAnUnknownCharacterIsLeftOutAndItsNeighboursMerge) {
  json file = SentencePieceJson();
  file["model"]["byte_fallback"] = false;
  file["model"]["unk_token"] = nullptr;
  const Encoding encoding = EncodeOk(*FromJson(file), "hel\xC3\xA9lo");
  EXPECT_THAT(encoding.ids, ElementsAre(kSpaceHello));
  EXPECT_THAT(encoding.byte_offsets, ElementsAre(std::pair<size_t, size_t>{0, 7}));
}

TEST(SentencePiece, AWordOfUnknownCharactersAloneGivesNoTokens) {
  json file = MetaspaceJson("never", false);
  file["model"]["byte_fallback"] = false;
  file["model"]["unk_token"] = nullptr;
  EXPECT_THAT(EncodeOk(*FromJson(file), "\xC3\xA9\xC3\xA9").ids, ElementsAre());
}

TEST(SentencePiece, EachSectionBetweenSpecialTokensGetsItsOwnSpaceInTheLegacyLayout) {
  EXPECT_THAT(EncodeOk(*FromJson(SentencePieceJson()), "<s>hello</s>hello").ids,
              ElementsAre(kBos, kSpaceHello, kEos, kSpaceHello));
  EncodeOptions as_text;
  as_text.special_tokens_as_text = true;
  EXPECT_THAT(EncodeOk(*FromJson(SentencePieceJson()), "<s>", as_text).ids,
              ElementsAre(kSpace, ByteToken('<'), ByteToken('s'), ByteToken('>')));
}

TEST(SentencePiece, MetaspaceFirstPrependsOnlyAtTheStartOfTheInputAndNeverTwice) {
  const auto tokenizer = FromJson(MetaspaceJson("first", false));
  EXPECT_THAT(EncodeOk(*tokenizer, "hello").ids, ElementsAre(kSpaceHello));
  EXPECT_THAT(EncodeOk(*tokenizer, " hello").ids, ElementsAre(kSpaceHello));
  EXPECT_THAT(EncodeOk(*tokenizer, "<s>hello").ids, ElementsAre(kBos, kH, kEl, kLo));
  EXPECT_THAT(EncodeOk(*FromJson(MetaspaceJson("always", false)), "<s>hello").ids,
              ElementsAre(kBos, kSpaceHello));
  EXPECT_THAT(EncodeOk(*FromJson(MetaspaceJson("never", false)), "hello").ids,
              ElementsAre(kH, kEl, kLo));
}

TEST(SentencePiece, MetaspaceSplitKeepsMergesFromCrossingASpace) {
  EXPECT_THAT(EncodeOk(*FromJson(MetaspaceJson("always", false)), "d d").ids,
              ElementsAre(kSpace, kDSpace, kD));
  EXPECT_THAT(EncodeOk(*FromJson(MetaspaceJson("always", true)), "d d").ids,
              ElementsAre(kSpace, kD, kSpace, kD));
}

TEST(SentencePiece, DecodesSpacesAndBytesAndStripsTheFirstSpace) {
  const auto tokenizer = FromJson(SentencePieceJson());
  EXPECT_EQ(*tokenizer->Decode({kSpaceHello, kSpace, ByteToken(0xC3), ByteToken(0xA9), kEos}),
            "hello \xC3\xA9</s>");
  EXPECT_EQ(*tokenizer->Decode({kSpace, kSpaceHello}), " hello");
}

TEST(SentencePiece, ABrokenByteRunDecodesToOneReplacementCharacterPerByte) {
  const auto tokenizer = FromJson(SentencePieceJson());
  EXPECT_EQ(*tokenizer->Decode({kH, ByteToken(0xC3), ByteToken(0xC3), kH}),
            "h\xEF\xBF\xBD\xEF\xBF\xBDh");
}

TEST(SentencePiece, TheMetaspaceDecoderDropsTheFirstTokensReplacements) {
  json file = MetaspaceJson("always", true);
  file["decoder"] = {{"type", "Metaspace"}, {"replacement", "▁"}, {"prepend_scheme", "always"}};
  const auto tokenizer = FromJson(file);
  EXPECT_EQ(*tokenizer->Decode({kTwoSpaces, kSpaceHello}), " hello");
  file["decoder"]["prepend_scheme"] = "never";
  EXPECT_EQ(*FromJson(file)->Decode({kTwoSpaces, kSpaceHello}), "   hello");
}

TEST(SentencePiece, TheDescriptionSaysSentencePieceAndByteFallback) {
  EXPECT_EQ(FromJson(SentencePieceJson())->description(),
            "SentencePiece-style BPE from tokenizer.json (272 tokens, 7 merges, 3 added tokens, "
            "byte fallback; normalizer Prepend+Replace; pre-tokenizer none; decoder "
            "Replace+ByteFallback+Fuse+Strip)");
  const auto tokenizer = FromJson(SentencePieceJson());
  EXPECT_EQ(tokenizer->bos_token_id(), kBos);
  EXPECT_EQ(tokenizer->eos_token_id(), kEos);
}

// ---------------------------------------------------------------------------------------------
// Loading from a directory.

TEST(FromDirectory, ReadsVocabAndMerges) {
  TempDir dir;
  dir.Write("vocab.json", ByteVocab(kHelloTokens).dump());
  dir.Write("merges.txt", kHelloMerges);
  auto tokenizer = Tokenizer::FromDirectory(dir.path());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status();
  EXPECT_THAT(EncodeOk(**tokenizer, "hello world").ids, ElementsAre(kHello, kWorld));
}

TEST(FromDirectory, PrefersTokenizerJson) {
  TempDir dir;
  dir.Write("vocab.json", ByteVocab(kHelloTokens).dump());
  dir.Write("merges.txt", kHelloMerges);
  dir.Write("tokenizer.json", TokenizerJson({}, json::array()).dump());
  EXPECT_THAT((*Tokenizer::FromDirectory(dir.path()))->description(), HasSubstr("tokenizer.json"));
}

TEST(FromDirectory, WithoutTokenizerFilesIsNotFound) {
  TempDir dir;
  dir.Write("vocab.json", ByteVocab().dump());
  const auto tokenizer = Tokenizer::FromDirectory(dir.path());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorReasonOf(tokenizer.status()), "PATH_NOT_FOUND");
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("tokenizer.json"));
}

// ---------------------------------------------------------------------------------------------
// Refusals: unsupported kinds, bad files, bounds.

void ExpectUnimplemented(const json& file, const std::string& named) {
  const auto tokenizer = Tokenizer::FromTokenizerJson(file.dump());
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kUnimplemented) << tokenizer.status();
  EXPECT_EQ(ErrorReasonOf(tokenizer.status()), "NOT_IMPLEMENTED");
  EXPECT_THAT(tokenizer.status().message(), HasSubstr(named));
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("supported: byte-level BPE"));
}

TEST(Unsupported, WordPieceAndUnigramModelsAreRefusedNamingWhatIsSupported) {
  json word_piece = TokenizerJson({}, json::array());
  word_piece["model"] = {{"type", "WordPiece"}, {"vocab", {{"[UNK]", 0}}}, {"unk_token", "[UNK]"}};
  ExpectUnimplemented(word_piece, "model type 'WordPiece'");
  json unigram = TokenizerJson({}, json::array());
  unigram["model"] = {{"type", "Unigram"}, {"vocab", json::array()}};
  ExpectUnimplemented(unigram, "model type 'Unigram'");
}

TEST(Unsupported, ByteLevelPiecesOutOfPlaceAreRefused) {
  json metaspace = TokenizerJson({}, json::array());
  metaspace["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "▁"}};
  ExpectUnimplemented(metaspace, "decoder 'ByteLevel' for a BPE without a ByteLevel pre-tokenizer");
  json no_pre_tokenizer = TokenizerJson({}, json::array());
  no_pre_tokenizer["pre_tokenizer"] = nullptr;
  ExpectUnimplemented(no_pre_tokenizer, "decoder 'ByteLevel' for a BPE without");
  json byte_fallback = TokenizerJson({}, json::array());
  byte_fallback["model"]["byte_fallback"] = true;
  ExpectUnimplemented(byte_fallback, "byte_fallback with a ByteLevel pre-tokenizer");
  json after_split = SentencePieceJson();
  after_split["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"}, {"pattern", {{"String", "x"}}}, {"behavior", "Isolated"}},
        {{"type", "Metaspace"}, {"replacement", "▁"}}}}};
  ExpectUnimplemented(after_split, "a Metaspace pre-tokenizer that is not the first step");
}

TEST(Unsupported, OtherNormalizersAndDecodersAreRefused) {
  json lowercase = TokenizerJson({}, json::array());
  lowercase["normalizer"] = {{"type", "Lowercase"}};
  ExpectUnimplemented(lowercase, "normalizer 'Lowercase'");
  json metaspace_decoder = TokenizerJson({}, json::array());
  metaspace_decoder["decoder"] = {{"type", "Metaspace"}};
  ExpectUnimplemented(metaspace_decoder, "decoder 'Metaspace' for byte-level BPE");
  json regex_replace = SentencePieceJson();
  regex_replace["normalizer"] = {
      {"type", "Replace"}, {"pattern", {{"Regex", " +"}}}, {"content", "▁"}};
  ExpectUnimplemented(regex_replace, "a Replace normalizer with a Regex pattern");
  json word_piece_decoder = SentencePieceJson();
  word_piece_decoder["decoder"] = {{"type", "WordPiece"}};
  ExpectUnimplemented(word_piece_decoder, "decoder 'WordPiece' for a BPE without");
  json byte_level_decoder = SentencePieceJson();
  byte_level_decoder["decoder"] = {{"type", "ByteLevel"}};
  ExpectUnimplemented(byte_level_decoder, "decoder 'ByteLevel'");
}

TEST(BadFiles, AMetaspaceWithABadSchemeOrReplacementIsNamed) {
  json scheme = MetaspaceJson("sometimes", true);
  EXPECT_THAT(Tokenizer::FromTokenizerJson(scheme.dump()).status().message(),
              HasSubstr("prepend_scheme \"sometimes\" is none of"));
  json replacement = MetaspaceJson("first", true);
  replacement["pre_tokenizer"]["replacement"] = "__";
  EXPECT_EQ(ErrorReasonOf(Tokenizer::FromTokenizerJson(replacement.dump()).status()),
            "INVALID_MODEL_FILE");
}

TEST(BadFiles, AMergeOutsideTheVocabularyIsAnInvalidModelFile) {
  const auto tokenizer = Tokenizer::FromVocabAndMerges(ByteVocab().dump(), "h e\n");
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ErrorReasonOf(tokenizer.status()), "INVALID_MODEL_FILE");
  // Named by its place and part, never by its text (the file may be one the caller cannot read).
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("merge 0 (counted from 0, in file order): its merged token"));
  EXPECT_THAT(tokenizer.status().message(), ::testing::Not(HasSubstr("(he)")));
}

TEST(BadFiles, AMalformedMergesLineIsNamed) {
  const auto tokenizer =
      Tokenizer::FromVocabAndMerges(ByteVocab({"he"}).dump(), "#version: 0.2\nh e x\n");
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("merges.txt: line 2"));
}

TEST(BadFiles, NotJsonIsRefused) {
  EXPECT_EQ(ErrorReasonOf(Tokenizer::FromTokenizerJson("{").status()), "INVALID_MODEL_FILE");
  EXPECT_EQ(ErrorReasonOf(Tokenizer::FromVocabAndMerges("[]", "").status()), "INVALID_MODEL_FILE");
}

TEST(BadFiles, AnIdOutOfRangeIsRefused) {
  json vocab = ByteVocab();
  vocab["huge"] = int64_t{1} << 40;
  EXPECT_THAT(Tokenizer::FromVocabAndMerges(vocab.dump(), "").status().message(),
              HasSubstr("has id 1099511627776"));
}

TEST(Bounds, NestingDeeperThanTheBoundIsRefusedWhileParsing) {
  std::string deep = R"({"model": )";
  for (int i = 0; i < 100000; ++i) deep += "[";
  const auto tokenizer = Tokenizer::FromTokenizerJson(deep);
  EXPECT_EQ(tokenizer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("nested deeper than 64 levels"));
}

TEST(Bounds, AFileOverTheSizeBoundIsRefusedUnread) {
  const std::string file = TokenizerJson({}, json::array()).dump();
  const auto tokenizer = Tokenizer::FromTokenizerJson(file, {.max_file_bytes = 1000});
  EXPECT_EQ(ErrorReasonOf(tokenizer.status()), "INVALID_MODEL_FILE");
  EXPECT_THAT(tokenizer.status().message(), HasSubstr("at most 1000"));
  TempDir dir;
  dir.Write("vocab.json", ByteVocab().dump());
  dir.Write("merges.txt", std::string(5000, 'x'));
  EXPECT_THAT(Tokenizer::FromDirectory(dir.path(), {.max_file_bytes = 4000}).status().message(),
              HasSubstr("merges.txt has 5000 bytes; at most 4000"));
}

}  // namespace
}  // namespace posbias::tokenizer
