#include "server/tokenizer/bpe.h"

#include <array>
#include <queue>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"
#include "server/tokenizer/utf8.h"

namespace posbias::tokenizer {
namespace {

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes for
// U+0100 onwards in byte order.
struct Alphabet {
  std::array<std::string, 256> chars;
  std::unordered_map<uint32_t, uint8_t> bytes;  // Code point → byte.
  Alphabet() {
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      const uint32_t code_point = printable ? b : next++;
      bytes[code_point] = static_cast<uint8_t>(b);
      std::string& utf8 = chars[b];
      if (code_point < 0x80) {
        utf8.push_back(static_cast<char>(code_point));
      } else {
        utf8.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
        utf8.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
      }
    }
  }
};

const Alphabet& TheAlphabet() {
  static const Alphabet* alphabet = new Alphabet();
  return *alphabet;
}

// Names the merge by its place, never by its text: the file may be one the caller cannot read.
absl::Status BadMerge(size_t rank, const char* part) {
  return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                         absl::StrCat("merge ", rank, " (counted from 0, in file order): its ", part,
                                      " is not in the vocabulary; expected both tokens of a merge and their "
                                      "concatenation to be vocabulary tokens"));
}

}  // namespace

const std::string& ByteLevelChar(uint8_t byte) { return TheAlphabet().chars[byte]; }

std::string ByteLevelEncode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char c : bytes) out.append(ByteLevelChar(static_cast<uint8_t>(c)));
  return out;
}

bool ByteLevelDecode(std::string_view token, std::string* bytes) {
  const Alphabet& alphabet = TheAlphabet();
  bool all_known = true;
  for (size_t i = 0; i < token.size();) {
    const auto lead = static_cast<uint8_t>(token[i]);
    const size_t length = lead < 0x80 ? 1 : lead < 0xE0 ? 2 : lead < 0xF0 ? 3 : 4;
    uint32_t code_point = length == 1 ? lead : lead & (0x7F >> length);
    for (size_t k = 1; k < length && i + k < token.size(); ++k) {
      code_point = (code_point << 6) | (static_cast<uint8_t>(token[i + k]) & 0x3F);
    }
    const auto found = alphabet.bytes.find(code_point);
    if (found != alphabet.bytes.end()) {
      bytes->push_back(static_cast<char>(found->second));
    } else {
      bytes->append(token.substr(i, length));
      all_known = false;
    }
    i += length;
  }
  return all_known;
}

std::string ByteFallbackToken(uint8_t byte) {
  constexpr char kHex[] = "0123456789ABCDEF";
  return {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
}

bool ParseByteFallbackToken(std::string_view token, uint8_t* byte) {
  if (token.size() != 6 || !token.starts_with("<0x") || token[5] != '>') return false;
  int value = 0;
  for (const char c : token.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (digit < 0) return false;
    value = value * 16 + digit;
  }
  *byte = static_cast<uint8_t>(value);
  return true;
}

absl::StatusOr<Bpe> Bpe::Create(const BpeModelSpec& spec) {
  Bpe bpe;
  bpe.alphabet_ = spec.alphabet;
  bpe.byte_fallback_ = spec.byte_fallback;
  bpe.fuse_unk_ = spec.fuse_unk;
  bpe.ids_.reserve(spec.vocab.size());
  for (const auto& [token, id] : spec.vocab) bpe.ids_[token] = id;
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<uint8_t>(b);
    const auto found = bpe.ids_.find(spec.alphabet == BpeAlphabet::kBytes ? ByteLevelChar(byte)
                                                                           : ByteFallbackToken(byte));
    bpe.byte_ids_[b] = found == bpe.ids_.end() ? -1 : found->second;
  }
  if (!spec.unk_token.empty()) {
    const auto found = bpe.ids_.find(spec.unk_token);
    if (found == bpe.ids_.end()) {
      return ErrorWithReason(
          absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
          "model.unk_token is not in the vocabulary; expected the unknown token to be a vocabulary token");
    }
    bpe.unk_id_ = found->second;
  }
  bpe.ignore_merges_ = spec.ignore_merges;
  bpe.merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [left, right] = spec.merges[rank];
    const auto l = bpe.ids_.find(left), r = bpe.ids_.find(right), m = bpe.ids_.find(left + right);
    if (l == bpe.ids_.end()) return BadMerge(rank, "left token");
    if (r == bpe.ids_.end()) return BadMerge(rank, "right token");
    if (m == bpe.ids_.end()) return BadMerge(rank, "merged token");
    // The first (lowest) rank of a repeated merge wins, as in Hugging Face's BPE.
    bpe.merges_.emplace(PairKey(l->second, r->second),
                        Merge{static_cast<int32_t>(rank), m->second});
  }
  return bpe;
}

void Bpe::InitialSymbols(std::string_view word, std::vector<Symbol>* symbols) const {
  const auto add = [&](int64_t id, size_t begin, size_t end) {
    symbols->push_back({id, static_cast<int64_t>(symbols->size()) - 1, -1, begin, end});
  };
  if (alphabet_ == BpeAlphabet::kBytes) {
    for (size_t i = 0; i < word.size(); ++i) add(byte_ids_[static_cast<uint8_t>(word[i])], i, i + 1);
  } else {
    std::string character;
    for (size_t i = 0; i < word.size();) {
      const size_t length = Utf8CharLength(word, i);
      character.assign(word.substr(i, length));
      const auto found = ids_.find(character);
      bool placed = found != ids_.end();
      if (placed) {
        add(found->second, i, i + length);
      } else if (byte_fallback_) {
        placed = true;
        for (size_t k = i; k < i + length; ++k) placed = placed && byte_ids_[static_cast<uint8_t>(word[k])] >= 0;
        for (size_t k = i; placed && k < i + length; ++k) add(byte_ids_[static_cast<uint8_t>(word[k])], k, k + 1);
      }
      if (!placed && unk_id_ >= 0) {
        // Unknown: the unknown token, fused with an unknown just before it when fuse_unk. Without
        // an unknown token the character is left out, its neighbours adjacent (Hugging Face's).
        if (fuse_unk_ && !symbols->empty() && symbols->back().id == -1 && symbols->back().end == i) {
          symbols->back().end = i + length;
        } else {
          add(-1, i, i + length);
        }
      }
      i += length;
    }
  }
  for (size_t i = 0; i + 1 < symbols->size(); ++i) (*symbols)[i].next = static_cast<int64_t>(i + 1);
}

void Bpe::Tokenize(std::string_view word, std::vector<WordToken>* out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    const auto found = ids_.find(alphabet_ == BpeAlphabet::kBytes ? ByteLevelEncode(word) : std::string(word));
    if (found != ids_.end()) {
      out->push_back({found->second, 0, word.size()});
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  InitialSymbols(word, &symbols);
  if (symbols.empty()) return;  // Every character left out (no unknown token, no byte fallback).
  struct Candidate {
    int32_t rank;
    int64_t position;  // Index of the left symbol.
    int64_t left, right, merged;
    bool operator>(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : position > other.position;
    }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  const auto consider = [&](int64_t position) {
    if (position < 0 || symbols[position].next < 0) return;
    const int64_t left = symbols[position].id, right = symbols[symbols[position].next].id;
    if (left < 0 || right < 0) return;
    const auto found = merges_.find(PairKey(left, right));
    if (found != merges_.end())
      heap.push({found->second.rank, position, left, right, found->second.merged});
  };
  for (size_t i = 0; i + 1 < symbols.size(); ++i) consider(static_cast<int64_t>(i));
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& symbol = symbols[top.position];
    if (symbol.begin == symbol.end || symbol.next < 0 || symbol.id != top.left) continue;
    Symbol& next = symbols[symbol.next];
    if (next.id != top.right) continue;  // Stale: a neighbour changed since this pair was seen.
    symbol.id = top.merged;
    symbol.end = next.end;
    next.begin = next.end;
    symbol.next = next.next;
    if (symbol.next >= 0) symbols[symbol.next].prev = top.position;
    consider(symbol.prev);
    consider(top.position);
  }
  for (int64_t i = 0; i >= 0; i = symbols[i].next) {
    const Symbol& symbol = symbols[i];
    const int64_t id = symbol.id >= 0 ? symbol.id : unk_id_;
    if (id >= 0) out->push_back({id, symbol.begin, symbol.end});
  }
}

}  // namespace posbias::tokenizer
