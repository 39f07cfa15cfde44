// The model of a byte-level BPE tokenizer (GPT-2, Qwen2): a vocabulary of byte-level strings, each
// byte 0..255 spelled as one printable character (GPT-2's bytes_to_unicode table), and ranked
// merges of adjacent symbols.
//
// A word (one pre-tokenizer piece, as bytes) starts as one symbol per byte and is merged lowest
// rank first, leftmost first among equal ranks, with a heap over the adjacent pairs: O(n log n) in
// the word's length, so a 100k-character run of one letter costs milliseconds, not hours.
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

struct BpeModelSpec {
  std::vector<std::pair<std::string, int64_t>> vocab;       // Byte-level string → id.
  std::vector<std::pair<std::string, std::string>> merges;  // In rank order.
  std::string unk_token;       // Empty: none (bytes missing from the vocabulary are dropped).
  bool ignore_merges = false;  // A piece already in the vocabulary is one token.
};

// One token of a word: its id and its bytes [begin, end) within the word.
struct WordToken {
  int64_t id;
  size_t begin;
  size_t end;
};

class ByteLevelBpe {
 public:
  // Refuses merges whose parts or result are not in the vocabulary (INVALID_MODEL_FILE).
  static absl::StatusOr<ByteLevelBpe> Create(const BpeModelSpec& spec);

  // The tokens of one word (raw bytes, not byte-level strings). Thread-safe.
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
  std::unordered_map<std::string, int64_t> ids_;
  std::unordered_map<uint64_t, Merge> merges_;
  int64_t byte_ids_[256];  // Id of each byte's one-character string; -1 when absent.
  int64_t unk_id_ = -1;
  bool ignore_merges_ = false;
};

}  // namespace posbias::tokenizer
