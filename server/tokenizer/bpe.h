// The model of a BPE tokenizer: a vocabulary and ranked merges of adjacent symbols, over one of two
// alphabets:
//  - bytes (GPT-2, Qwen2, Llama 3): every byte 0..255 is spelled as one printable character (GPT-2's
//    bytes_to_unicode table), and a word starts as one symbol per byte;
//  - characters (SentencePiece-style BPE: Llama 2, TinyLlama, Mistral): a word starts as one symbol
//    per Unicode character; a character missing from the vocabulary becomes the tokens <0xNN> of its
//    UTF-8 bytes when the model has `byte_fallback`, else the unknown token (consecutive unknowns
//    fused into one with `fuse_unk`), else nothing — as Hugging Face's BPE::merge_word.
//
// Symbols are merged lowest rank first, leftmost first among equal ranks, with a heap over the
// adjacent pairs: O(n log n) in the word's length, so a 100k-character run of one letter costs
// milliseconds, not hours.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::tokenizer {

// The byte-level alphabet: the character (as UTF-8) standing for each byte, and back.
const std::string& ByteLevelChar(uint8_t byte);
// Bytes of a byte-level string; false when it holds a character outside the alphabet (those are
// then copied as they are).
bool ByteLevelDecode(std::string_view token, std::string* bytes);
// The byte-level string of `bytes`.
std::string ByteLevelEncode(std::string_view bytes);

enum class BpeAlphabet { kBytes, kCharacters };

// The token <0xNN> of byte `byte` (SentencePiece's byte tokens, upper-case hex); and back, false
// when `token` is not one.
std::string ByteFallbackToken(uint8_t byte);
bool ParseByteFallbackToken(std::string_view token, uint8_t* byte);

struct BpeModelSpec {
  BpeAlphabet alphabet = BpeAlphabet::kBytes;
  std::vector<std::pair<std::string, int64_t>> vocab;       // Token (byte-level string) → id.
  std::vector<std::pair<std::string, std::string>> merges;  // In rank order.
  std::string unk_token;       // Empty: none (symbols missing from the vocabulary are dropped).
  bool ignore_merges = false;  // A piece already in the vocabulary is one token.
  bool byte_fallback = false;  // kCharacters: unknown characters as <0xNN> byte tokens.
  bool fuse_unk = false;       // Consecutive unknown symbols become one unknown token.
};

// One token of a word: its id and its bytes [begin, end) within the word.
struct WordToken {
  int64_t id;
  size_t begin;
  size_t end;
};

class Bpe {
 public:
  // Refuses merges whose parts or result are not in the vocabulary (INVALID_MODEL_FILE).
  static absl::StatusOr<Bpe> Create(const BpeModelSpec& spec);

  // The tokens of one word (raw bytes, not byte-level strings; valid UTF-8 for kCharacters).
  // Thread-safe.
  void Tokenize(std::string_view word, std::vector<WordToken>* out) const;

  // Byte-level string → id, and back (vocabulary only).
  const std::unordered_map<std::string, int64_t>& ids() const { return ids_; }

 private:
  struct Merge {
    int32_t rank;
    int64_t merged;
  };
  static uint64_t PairKey(int64_t left, int64_t right) {
    return (static_cast<uint64_t>(left) << 32) | static_cast<uint32_t>(right);
  }
  // One symbol per byte (kBytes) or per character with its fallbacks (kCharacters), before merges.
  struct Symbol {
    int64_t id;
    int64_t prev, next;  // Neighbours' indices; -1 at the ends.
    size_t begin, end;   // Bytes of the word; begin == end once merged into its left neighbour.
  };
  void InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const;

  BpeAlphabet alphabet_ = BpeAlphabet::kBytes;
  std::unordered_map<std::string, int64_t> ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  // kBytes: id of each byte's one-character string; kCharacters with byte_fallback: id of its
  // <0xNN> token. -1 when absent.
  int64_t byte_ids_[256];
  int64_t unk_id_ = -1;
  bool ignore_merges_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
};

}  // namespace posbias::tokenizer
