// What a tokenizer file says, checked and reduced to what the pipeline runs: the parsing of
// tokenizer.json (byte-level and SentencePiece-style BPE) and of GPT-2's vocab.json + merges.txt,
// and every refusal of an unsupported kind.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "server/tokenizer/bpe.h"
#include "server/tokenizer/detokenizer.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/tokenizer.h"

namespace posbias::tokenizer {

// GPT-2's pre-tokenizer regex (Hugging Face's ByteLevel with use_regex, OpenAI's encoder.py).
inline constexpr std::string_view kGpt2SplitRegex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// The largest id a tokenizer may use, exclusive (the models' vocabularies are at most 262,144).
inline constexpr int64_t kMaxTokenId = int64_t{1} << 20;

struct AddedTokenSpec {
  int64_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;  // Matched in the normalized text rather than the input.
  bool lstrip = false;      // Swallows the whitespace on its left.
  bool rstrip = false;      // ... and on its right.
};

// One Split step of the pre-tokenizer (behavior Isolated).
struct SplitSpec {
  std::string pattern;
  bool literal = false;  // A String pattern rather than a Regex.
};

// The Metaspace pre-tokenizer's text edit: every " " becomes `replacement`, which is put in front
// of a piece that does not start with it — of every piece (always), of the piece at the start of
// the input (first), or of none (never). Its split on `replacement` is a SplitSpec after it.
struct MetaspaceSpec {
  enum class PrependScheme { kAlways, kFirst, kNever };
  std::string replacement = "\xE2\x96\x81";  // U+2581 ▁
  PrependScheme prepend_scheme = PrependScheme::kAlways;
};

struct TokenizerSpec {
  BpeModelSpec model;
  std::vector<AddedTokenSpec> added_tokens;
  std::vector<NormalizerSpec> normalizers;  // Applied in order.
  std::optional<MetaspaceSpec> metaspace;   // The first pre-tokenizer step, when there is one.
  std::vector<SplitSpec> splits;            // Applied in order, each to every piece so far.
  // Token strings → text for the character alphabet; empty for byte-level BPE (ByteLevel).
  std::vector<DecoderStep> decoder;
  std::string description;
};

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view json_text,
                                                 const LoadOptions& options);
absl::StatusOr<TokenizerSpec> ParseVocabAndMerges(std::string_view vocab_json,
                                                  std::string_view merges_text,
                                                  const LoadOptions& options);

// The special token a tokenizer_config.json names under `key` ("eos_token", "bos_token"): a string
// or {"content": ...}; empty when none.
absl::StatusOr<std::string> SpecialTokenOfConfig(std::string_view config_json, std::string_view key,
                                                 const LoadOptions& options);

}  // namespace posbias::tokenizer
