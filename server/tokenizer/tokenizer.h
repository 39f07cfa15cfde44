// The tokenizer room's door: text ↔ token ids for the model families posbias measures, read from a
// registered checkpoint directory. Torch-free and gRPC-free.
//
// What is supported — the two kinds of BPE these families use:
//  - Byte-level BPE (GPT-2, Qwen2, Llama 3, Pythia): Hugging Face `tokenizer.json` with model BPE
//    (byte-level vocabulary, merges as "a b" strings or ["a", "b"] pairs, optional unk_token,
//    ignore_merges); normalizer null, NFC, NFKC or a Sequence of them; pre-tokenizer ByteLevel
//    (with its GPT-2 regex or without), Split with a Regex or String pattern and behavior Isolated,
//    or a Sequence of those; decoder ByteLevel. Or GPT-2's `vocab.json` + `merges.txt`, with
//    GPT-2's ByteLevel regex and `<|endoftext|>` (when in the vocabulary) as its one special token,
//    as Hugging Face's GPT2Tokenizer sets it up.
//  - SentencePiece-style BPE (Llama 2, TinyLlama, Mistral, Gemma 3): `tokenizer.json` with model BPE over
//    characters (no ByteLevel pre-tokenizer), byte_fallback (<0xNN> tokens for characters not in
//    the vocabulary) and fuse_unk; normalizers Prepend and Replace with a String pattern (the
//    "legacy" layout: Prepend "▁", Replace " " → "▁", no pre-tokenizer, so each section between
//    added tokens is one word) besides NFC / NFKC; pre-tokenizer Metaspace (replacement,
//    prepend_scheme always / first / never or add_prefix_space, split) as the first step, then
//    Split steps (Isolated, or MergedWithPrevious on one character: Gemma 3's); decoder Metaspace
//    or a Sequence of Replace, ByteFallback, Fuse and Strip.
//  - Both: added tokens (special or not, normalized or not, lstrip / rstrip). The post-processor
//    only adds template tokens (BOS), which Encode never does (as `add_special_tokens=False`), so
//    any is accepted.
// Anything else (WordPiece, Unigram, WordLevel, dropout, other normalizers, pre-tokenizers or
// decoders, Regex Replace, ByteLevel add_prefix_space, single_word added tokens) is refused with
// UNIMPLEMENTED / NOT_IMPLEMENTED naming the kind found and what is supported. Files are bounded
// (LoadOptions) and malformed ones are INVALID_MODEL_FILE.
//
// Encoding follows Hugging Face's pipeline: invalid UTF-8 in the input is first repaired as the
// WHATWG decoder does (each maximal ill-formed subpart becomes U+FFFD, which is what Node's
// reference tokenizers see); added tokens then split the text (leftmost, longest first); each
// remaining section is normalized (Metaspace's edit follows), split by the pre-tokenizer's regexes
// (PCRE2, Unicode properties) and each piece is BPE-merged. Offsets are byte offsets into the
// caller's input, also through NFC and the U+FFFD repair (see mapped_text.h and normalizer.h); a
// prepended "▁" belongs to the first byte of the text it precedes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/files/open_beneath.h"

namespace posbias::tokenizer {

class TokenizerPipeline;

// The tokens of one text.
struct Encoding {
  std::vector<int64_t> ids;
  // Per token, the bytes [first, second) of the input it came from: exactly its bytes, also when a
  // character's bytes are split over several tokens (a CJK character in two byte-level tokens);
  // a span the U+FFFD repair or the normalizer rewrote is named whole by every token it feeds. An
  // added token's offsets include the whitespace its lstrip / rstrip swallowed.
  std::vector<std::pair<size_t, size_t>> byte_offsets;
};

struct EncodeOptions {
  // Special added tokens (<|endoftext|>, <|im_start|>, ...) in the text are tokenized as plain text
  // instead of becoming their ids (Hugging Face's `split_special_tokens`). Non-special added tokens
  // are matched either way.
  bool special_tokens_as_text = false;
};

// Bounds on what the loader reads.
struct LoadOptions {
  size_t max_file_bytes = size_t{64} << 20;  // tokenizer.json, vocab.json, merges.txt each.
  int max_json_depth = 64;                   // Nesting of the JSON files.
  // Where FromDirectory may open files (files/open_beneath.h): a tenant's folder of the model root on
  // the server; anywhere by default.
  files::Scope scope = {};
};

class Tokenizer {
 public:
  // From a checkpoint directory: tokenizer.json when present, else vocab.json + merges.txt. The
  // end-of-sequence token is the tokenizer_config.json `eos_token` when that file names one that
  // exists, else by the rule of eos_token_id().
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromDirectory(const std::string& dir,
                                                                  const LoadOptions& options = {});
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromTokenizerJson(
      std::string_view json_text, const LoadOptions& options = {});
  static absl::StatusOr<std::unique_ptr<Tokenizer>> FromVocabAndMerges(
      std::string_view vocab_json, std::string_view merges_text, const LoadOptions& options = {});
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // `utf8` (any bytes) as token ids with byte offsets. Fails only when the regex engine gives up
  // (RESOURCE_EXHAUSTED) or ICU fails (INTERNAL). Thread-safe.
  absl::StatusOr<Encoding> Encode(std::string_view utf8, const EncodeOptions& options = {}) const;

  // The text of `ids` (added tokens as their content), valid UTF-8: a byte sequence the ids cut
  // mid-character is repaired with U+FFFD, as Hugging Face decodes. An id that is no token is
  // INVALID_ARGUMENT naming its index, the id and the vocabulary size.
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const;

  // One more than the largest id (vocabulary and added tokens); every id below it that is a token
  // decodes.
  int64_t vocab_size() const;

  // The end-of-sequence token: tokenizer_config.json's `eos_token` (FromDirectory only) when it
  // names a token; else the first of <|endoftext|>, <|im_end|>, </s>, <|end_of_text|> that is an
  // added token; else the first of them in the vocabulary; else none.
  std::optional<int64_t> eos_token_id() const;
  // The beginning-of-sequence token: tokenizer_config.json's `bos_token` (FromDirectory only) when
  // it names a token; else the first of <|begin_of_text|>, <s>, <|startoftext|> that is a token
  // (added first); else none (GPT-2's vocabulary has none).
  std::optional<int64_t> bos_token_id() const;

  // What kind of tokenizer this is, e.g. "byte-level BPE from tokenizer.json (151643 tokens,
  // 151387 merges, 26 added tokens; normalizer NFC; pre-tokenizer Split+ByteLevel)" or
  // "SentencePiece-style BPE from tokenizer.json (32000 tokens, 58980 merges, 3 added tokens, byte
  // fallback; normalizer Prepend+Replace; pre-tokenizer none; decoder Replace+ByteFallback+...)".
  const std::string& description() const;

 private:
  explicit Tokenizer(std::unique_ptr<TokenizerPipeline> pipeline);
  std::unique_ptr<TokenizerPipeline> pipeline_;
};

}  // namespace posbias::tokenizer
