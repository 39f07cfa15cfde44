// The byte-level tokenizer the trainer writes when no --tokenizer is given: every byte one token.
//
// A Hugging Face tokenizer.json with model BPE whose vocabulary is GPT-2's 256 byte-level symbols
// (bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for U+0100 ..
// U+0143), id = byte value, no merges; pre-tokenizer and decoder ByteLevel (add_prefix_space
// false, use_regex true); one special added token <|endoftext|> with id 256. So the ids of a text
// are its UTF-8 bytes, a model needs a vocabulary of at least 257, and the files load both in the
// tokenizer room (server/tokenizer/tokenizer.h) and in Hugging Face tokenizers.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"

namespace posbias::train {

inline constexpr int64_t kByteLevelEosId = 256;
inline constexpr int64_t kByteLevelVocabSize = 257;
inline constexpr char kByteLevelEosToken[] = "<|endoftext|>";

// GPT-2's printable stand-in of one byte, as UTF-8 (bytes_to_unicode).
std::string ByteLevelSymbol(uint8_t byte);

// The tokenizer.json text, and the tokenizer_config.json that names <|endoftext|> as EOS.
std::string ByteLevelTokenizerJson();
std::string ByteLevelTokenizerConfigJson();

// Writes tokenizer.json and tokenizer_config.json into `dir` (created if missing).
absl::Status WriteByteLevelTokenizer(const std::string& dir);

}  // namespace posbias::train
