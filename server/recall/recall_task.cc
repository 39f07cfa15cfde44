#include "server/recall/recall_task.h"

#include <algorithm>
#include <cmath>
#include <set>

#include "absl/strings/str_cat.h"
#include "server/recall/splitmix.h"
#include "server/status/error.h"

namespace posbias::recall {
namespace {

using Stream = SplitMix64;

absl::Status OptionError(const std::string& name, const std::string& value, const std::string& allowed) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, name, value, allowed});
}

std::string Letters(Stream& stream, int64_t count) {
  std::string word;
  for (int64_t i = 0; i < count; ++i) word.push_back(static_cast<char>('a' + stream.Below(26)));
  return word;
}

// One piece's ids; a tokenizer that gives none is an error (every piece is text).
absl::StatusOr<std::vector<int64_t>> Piece(const Tokenize& tokenize, std::string_view text) {
  auto ids = tokenize(text);
  if (!ids.ok()) return ids.status();
  if (ids->empty()) return absl::InvalidArgumentError(absl::StrCat("the tokenizer gives no token for \"", std::string(text), "\""));
  return ids;
}

struct Block {
  std::vector<int64_t> ids;  // " ", key, "=", value, " ".
  int64_t key_offset = 0;    // Where the key starts within the block.
  int64_t pair_tokens = 0;   // Key, "=" and value.
};

// The pairs: distinct keys, values drawn uniformly, each as its block of ids; pair 0 is the
// queried one.
struct Pairs {
  std::vector<Block> blocks;
  std::vector<std::string> keys;
  std::vector<int64_t> value_ids;
  char queried_value = 0;
};

absl::StatusOr<Pairs> DrawPairs(const TaskOptions& options, Stream& stream, const Tokenize& tokenize,
                                const std::vector<int64_t>& space, const std::vector<int64_t>& equals) {
  Pairs pairs;
  std::set<std::string> keys;
  while (static_cast<int64_t>(pairs.blocks.size()) < options.pairs) {
    std::string key = Letters(stream, options.key_letters);
    if (!keys.insert(key).second) continue;
    const char value = options.values[stream.Below(options.values.size())];
    auto key_ids = Piece(tokenize, key);
    auto value_piece = Piece(tokenize, std::string_view(&value, 1));
    if (!key_ids.ok()) return key_ids.status();
    if (!value_piece.ok()) return value_piece.status();
    if (value_piece->size() != 1) {
      return OptionError("values", std::string(1, value),
                         absl::StrCat("characters the model's tokenizer gives one token each (it gives \"", std::string(1, value),
                                      "\" ", value_piece->size(), ")"));
    }
    Block block;
    block.ids = space;
    block.key_offset = static_cast<int64_t>(block.ids.size());
    block.ids.insert(block.ids.end(), key_ids->begin(), key_ids->end());
    block.ids.insert(block.ids.end(), equals.begin(), equals.end());
    block.ids.push_back(value_piece->front());
    block.pair_tokens = static_cast<int64_t>(block.ids.size()) - block.key_offset;
    block.ids.insert(block.ids.end(), space.begin(), space.end());
    if (pairs.blocks.empty()) pairs.queried_value = value;
    pairs.blocks.push_back(std::move(block));
    pairs.keys.push_back(key);
    pairs.value_ids.push_back(value_piece->front());
  }
  return pairs;
}

// At least `count` filler ids: words of 2..7 letters a-z joined by spaces, tokenized at once.
absl::StatusOr<std::vector<int64_t>> Filler(Stream& stream, int64_t count, const Tokenize& tokenize) {
  std::string text;
  int64_t words = std::max<int64_t>(8, count / 4 + 8);
  for (;;) {
    while (words-- > 0) {
      if (!text.empty()) text.push_back(' ');
      text += Letters(stream, 2 + static_cast<int64_t>(stream.Below(6)));
    }
    if (count == 0) return std::vector<int64_t>{};
    auto ids = Piece(tokenize, text);
    if (!ids.ok()) return ids.status();
    if (static_cast<int64_t>(ids->size()) >= count) return ids;
    words = (count - static_cast<int64_t>(ids->size())) / 2 + 8;
  }
}

// Lays `blocks` into a region of `room` tokens with filler between them: gap sizes from sorted
// uniform cut points of the region's filler tokens.
void FillRegion(Stream& stream, const std::vector<const Block*>& blocks, int64_t room,
                const std::vector<int64_t>& filler, size_t& next_filler, std::vector<int64_t>& out) {
  int64_t blocks_tokens = 0;
  for (const Block* block : blocks) blocks_tokens += static_cast<int64_t>(block->ids.size());
  const int64_t gaps_total = room - blocks_tokens;
  std::vector<int64_t> cuts;
  for (size_t i = 0; i < blocks.size(); ++i) cuts.push_back(static_cast<int64_t>(stream.Below(gaps_total + 1)));
  std::sort(cuts.begin(), cuts.end());
  int64_t previous = 0;
  auto put_filler = [&](int64_t count) {
    out.insert(out.end(), filler.begin() + static_cast<std::ptrdiff_t>(next_filler),
               filler.begin() + static_cast<std::ptrdiff_t>(next_filler + count));
    next_filler += count;
  };
  for (size_t i = 0; i < blocks.size(); ++i) {
    put_filler(cuts[i] - previous);
    previous = cuts[i];
    out.insert(out.end(), blocks[i]->ids.begin(), blocks[i]->ids.end());
  }
  put_filler(gaps_total - previous);
}

}  // namespace

absl::Status CheckTaskOptions(const TaskOptions& options) {
  if (options.length < 1) return OptionError("length", absl::StrCat(options.length), ">= 1");
  if (options.pairs < 1 || options.pairs > 256) return OptionError("pairs", absl::StrCat(options.pairs), "1..256");
  if (options.key_letters < 1 || options.key_letters > 16) {
    return OptionError("key_letters", absl::StrCat(options.key_letters), "1..16");
  }
  if (std::pow(26.0, static_cast<double>(options.key_letters)) < 2.0 * static_cast<double>(options.pairs)) {
    return OptionError("key_letters", absl::StrCat(options.key_letters),
                       absl::StrCat("enough letters for ", options.pairs, " distinct keys (26^letters >= 2 x pairs)"));
  }
  const std::string& values = options.values;
  const bool printable = std::all_of(values.begin(), values.end(), [](char c) { return c > ' ' && c < 127 && c != '='; });
  const std::set<char> distinct(values.begin(), values.end());
  if (values.empty() || values.size() > 64 || !printable || distinct.size() != values.size()) {
    // Quoted as far as 64 characters, other bytes as \xNN: a refusal never echoes a long or
    // unprintable input back.
    std::string shown;
    for (size_t i = 0; i < values.size() && i < 64; ++i) {
      const auto byte = static_cast<unsigned char>(values[i]);
      if (byte >= ' ' && byte < 127 && byte != '\\' && byte != '"') {
        shown.push_back(values[i]);
      } else {
        absl::StrAppend(&shown, "\\x", absl::Hex(byte, absl::kZeroPad2));
      }
    }
    if (values.size() > 64) absl::StrAppend(&shown, "... (", values.size(), " characters)");
    return OptionError("values", absl::StrCat("\"", shown, "\""),
                       "1..64 distinct printable ASCII characters other than \"=\" and space");
  }
  return absl::OkStatus();
}

uint64_t ProbeSeed(uint64_t seed, uint64_t index) {
  Stream stream(seed ^ (0xD1B54A32D192ED03ULL * (index + 1)));
  return stream.Next();
}

absl::StatusOr<Probe> MakeProbe(const TaskOptions& options, double depth, uint64_t seed, const Tokenize& tokenize) {
  if (auto status = CheckTaskOptions(options); !status.ok()) return status;
  if (!(depth >= 0.0 && depth <= 1.0)) return OptionError("depth", absl::StrCat(depth), "a fraction in [0, 1]");
  Stream stream(seed);
  auto space = Piece(tokenize, " ");
  auto equals = Piece(tokenize, "=");
  if (!space.ok()) return space.status();
  if (!equals.ok()) return equals.status();
  auto drawn = DrawPairs(options, stream, tokenize, *space, *equals);
  if (!drawn.ok()) return drawn.status();
  const std::vector<Block>& blocks = drawn->blocks;
  const std::vector<std::string>& block_keys = drawn->keys;
  const std::vector<int64_t>& value_ids = drawn->value_ids;
  const char queried_value = drawn->queried_value;
  // The query: " ", the queried key, "=".
  std::vector<int64_t> query = *space;
  auto query_key = Piece(tokenize, block_keys[0]);
  if (!query_key.ok()) return query_key.status();
  query.insert(query.end(), query_key->begin(), query_key->end());
  query.insert(query.end(), equals->begin(), equals->end());
  const int64_t haystack = options.length - static_cast<int64_t>(query.size());
  int64_t blocks_tokens = 0, longest = 0;
  for (const Block& block : blocks) {
    blocks_tokens += static_cast<int64_t>(block.ids.size());
    longest = std::max<int64_t>(longest, static_cast<int64_t>(block.ids.size()));
  }
  const int64_t queried = static_cast<int64_t>(blocks[0].ids.size());
  const int64_t offset = haystack < queried ? 0 : std::llround(depth * static_cast<double>(haystack - queried));
  const int64_t left = offset, right = haystack - offset - queried;
  const int64_t distractors = options.pairs - 1;
  const int64_t fits_left = left / longest, fits_right = right < 0 ? 0 : right / longest;
  // Depth-independent room: floor(l / k) + floor(r / k) >= floor((l + r) / k) - 1, so a haystack
  // with pairs x longest tokens beside the queried block holds the distractors at every depth (a
  // length that works at one depth works at all of them).
  const int64_t needed = static_cast<int64_t>(query.size()) + queried + options.pairs * longest;
  if (options.length < needed || haystack < blocks_tokens || fits_left + fits_right < distractors) {
    return OptionError("length", absl::StrCat(options.length),
                       absl::StrCat("at least ", needed, " tokens: room for the query (", query.size(), " tokens) and ",
                                    options.pairs, " pairs of ", longest,
                                    " tokens at every depth (a longer context, or fewer pairs)"));
  }
  // How many distractors go before the queried pair: each by the share of room there, then held
  // to what fits on either side.
  int64_t before = 0;
  const double p_left = left + right > 0 ? static_cast<double>(left) / static_cast<double>(left + right) : 0.0;
  for (int64_t i = 0; i < distractors; ++i) before += stream.Uniform() < p_left ? 1 : 0;
  before = std::clamp(before, std::max<int64_t>(0, distractors - fits_right), std::min(distractors, fits_left));
  std::vector<const Block*> left_blocks, right_blocks;
  for (int64_t i = 1; i <= distractors; ++i) (i <= before ? left_blocks : right_blocks).push_back(&blocks[i]);
  auto filler = Filler(stream, haystack - blocks_tokens, tokenize);
  if (!filler.ok()) return filler.status();
  Probe probe;
  probe.key = block_keys[0];
  probe.value = queried_value;
  size_t next_filler = 0;
  FillRegion(stream, left_blocks, left, *filler, next_filler, probe.tokens);
  probe.pair_start = static_cast<int64_t>(probe.tokens.size()) + blocks[0].key_offset + 1;
  probe.pair_tokens = blocks[0].pair_tokens;
  probe.tokens.insert(probe.tokens.end(), blocks[0].ids.begin(), blocks[0].ids.end());
  FillRegion(stream, right_blocks, right, *filler, next_filler, probe.tokens);
  probe.tokens.insert(probe.tokens.end(), query.begin(), query.end());
  probe.tokens.push_back(value_ids[0]);
  return probe;
}

}  // namespace posbias::recall
