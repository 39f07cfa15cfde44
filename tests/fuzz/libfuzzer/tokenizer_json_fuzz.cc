// libFuzzer harness: a tokenizer.json as a checkpoint brings it (Tokenizer::FromTokenizerJson),
// then a text through it (Encode, as text inputs of jobs and Tokenize use it) and the ids back
// (Decode).
//
// Input: the tokenizer.json text, then a NUL byte, then the text to encode (any bytes); without
// a NUL the whole input is the tokenizer.json and the text is a fixed sentence.
//
// Promises checked: every tokenizer.json is loaded or cleanly refused (fuzz_check.h); a loaded
// one encodes any bytes (or gives up with RESOURCE_EXHAUSTED when its split regex does), into ids
// below vocab_size() with one byte span per id inside the text; those ids decode to valid UTF-8,
// and special tokens taken as text encode too.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/tokenizer/tokenizer.h"
#include "server/tokenizer/utf8.h"
#include "tests/fuzz/libfuzzer/fuzz_check.h"

namespace {

using posbias::fuzz::Require;
using posbias::tokenizer::EncodeOptions;
using posbias::tokenizer::Tokenizer;

constexpr std::string_view kDefaultText = "Hello world, <|endoftext|> caf\xc3\xa9  12345\n\ttabs";

void CheckEncoding(const Tokenizer& tokenizer, std::string_view text, const EncodeOptions& options) {
  const auto encoding = tokenizer.Encode(text, options);
  if (!encoding.ok()) {
    Require(encoding.status().code() == absl::StatusCode::kResourceExhausted, "Encode failed",
            encoding.status().ToString());
    return;
  }
  Require(encoding->ids.size() == encoding->byte_offsets.size(), "one byte span per id");
  for (size_t i = 0; i < encoding->ids.size(); ++i) {
    const int64_t id = encoding->ids[i];
    Require(id >= 0 && id < tokenizer.vocab_size(), "an id outside the vocabulary", std::to_string(id));
    const auto [begin, end] = encoding->byte_offsets[i];
    Require(begin <= end && end <= text.size(), "a byte span outside the text",
            std::to_string(begin) + ".." + std::to_string(end) + " of " + std::to_string(text.size()));
  }
  const auto decoded = tokenizer.Decode(encoding->ids);
  Require(decoded.ok(), "the ids Encode gave do not decode", decoded.status().ToString());
  Require(posbias::tokenizer::RepairUtf8String(*decoded) == *decoded, "Decode gave invalid UTF-8");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string_view json = input.substr(0, nul);
  const std::string_view text = nul == std::string_view::npos ? kDefaultText : input.substr(nul + 1);
  const auto tokenizer = Tokenizer::FromTokenizerJson(json);
  if (!tokenizer.ok()) {
    posbias::fuzz::RequireCleanRefusal(tokenizer.status(), "FromTokenizerJson");
    return 0;
  }
  Require((*tokenizer)->vocab_size() > 0, "a loaded tokenizer without tokens");
  CheckEncoding(**tokenizer, text, {});
  CheckEncoding(**tokenizer, text, {.special_tokens_as_text = true});
  return 0;
}
