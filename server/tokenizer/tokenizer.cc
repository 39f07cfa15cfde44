#include "server/tokenizer/tokenizer.h"

#include <algorithm>
#include <filesystem>
#include <map>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"
#include "server/tokenizer/bpe.h"
#include "server/tokenizer/detokenizer.h"
#include "server/tokenizer/mapped_text.h"
#include "server/tokenizer/normalizer.h"
#include "server/tokenizer/split_pattern.h"
#include "server/tokenizer/tokenizer_spec.h"
#include "server/tokenizer/utf8.h"

namespace posbias::tokenizer {
namespace {

// Unicode White_Space (what lstrip / rstrip of an added token swallow).
bool IsWhiteSpace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

uint32_t CodePointAt(std::string_view text, size_t at, size_t length) {
  const auto lead = static_cast<uint8_t>(text[at]);
  if (length == 1) return lead;
  uint32_t c = lead & (0x7F >> length);
  for (size_t k = 1; k < length; ++k) c = (c << 6) | (static_cast<uint8_t>(text[at + k]) & 0x3F);
  return c;
}

// Where leading white space of text[begin, end) ends.
size_t SkipWhiteSpace(std::string_view text, size_t begin, size_t end) {
  while (begin < end) {
    const size_t length = Utf8CharLength(text, begin);
    if (!IsWhiteSpace(CodePointAt(text, begin, length))) break;
    begin += length;
  }
  return begin;
}

// Where trailing white space of text[begin, end) starts.
size_t TrimWhiteSpace(std::string_view text, size_t begin, size_t end) {
  while (end > begin) {
    size_t start = end - 1;
    while (start > begin && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    if (!IsWhiteSpace(CodePointAt(text, start, end - start))) break;
    end = start;
  }
  return end;
}

// A run of text, or one added token, of a section.
struct Section {
  size_t begin, end;
  int added = -1;  // Index into the added tokens; -1 for text.
};

// Leftmost-longest matching of a set of added tokens (a byte trie), as Hugging Face splits.
class AddedTokenMatcher {
 public:
  void Add(const std::string& content, int index) {
    int node = 0;
    for (const char c : content) {
      auto [it, inserted] = nodes_[node].next.emplace(c, static_cast<int>(nodes_.size()));
      if (inserted) nodes_.emplace_back();
      node = it->second;
    }
    nodes_[node].token = index;
    empty_ = false;
  }
  bool empty() const { return empty_; }

  // text[0, size) in sections; tokens for which `skip(index)` holds are not matched.
  template <typename Skip>
  std::vector<Section> Split(std::string_view text, const Skip& skip) const {
    std::vector<Section> sections;
    size_t start = 0;
    for (size_t i = 0; i < text.size();) {
      int node = 0, match = -1;
      size_t match_end = i;
      for (size_t j = i; j < text.size(); ++j) {
        const auto next = nodes_[node].next.find(text[j]);
        if (next == nodes_[node].next.end()) break;
        node = next->second;
        if (nodes_[node].token >= 0 && !skip(nodes_[node].token)) {
          match = nodes_[node].token;
          match_end = j + 1;
        }
      }
      if (match < 0) {
        ++i;
        continue;
      }
      if (i > start) sections.push_back({start, i});
      sections.push_back({i, match_end, match});
      i = start = match_end;
    }
    if (start < text.size()) sections.push_back({start, text.size()});
    return sections;
  }

 private:
  struct Node {
    std::map<char, int> next;
    int token = -1;
  };
  std::vector<Node> nodes_ = std::vector<Node>(1);
  bool empty_ = true;
};

absl::StatusOr<std::string> ReadBounded(const std::filesystem::path& path,
                                        const LoadOptions& options) {
  return files::ReadBeneath(options.scope, path.string(), options.max_file_bytes);
}

}  // namespace

// The loaded tokenizer: everything Encode and Decode use, built once.
class TokenizerPipeline {
 public:
  static absl::StatusOr<std::unique_ptr<TokenizerPipeline>> Create(TokenizerSpec spec);

  absl::StatusOr<Encoding> Encode(std::string_view utf8, const EncodeOptions& options) const;
  absl::StatusOr<std::string> Decode(const std::vector<int64_t>& ids) const;

  // The id of `content`, an added token first, else a vocabulary token.
  std::optional<int64_t> IdOf(const std::string& content) const;

  int64_t vocab_size = 0;
  std::optional<int64_t> eos, bos;
  std::string description;

 private:
  explicit TokenizerPipeline(Bpe bpe) : bpe_(std::move(bpe)) {}

  // Splits `sections` of `text` around the added tokens of `matcher`, then applies lstrip / rstrip.
  std::vector<Section> SplitAdded(std::string_view text, const AddedTokenMatcher& matcher,
                                  const EncodeOptions& options) const;
  // Appends the tokens of one text section (normalized, then split further).
  absl::Status EncodeSection(const MappedText& section, const EncodeOptions& options,
                             Encoding* out) const;
  // Appends the tokens of normalized text: pre-tokenizer pieces, each BPE-merged.
  absl::Status EncodePieces(const MappedText& text, size_t begin, size_t end, Encoding* out) const;
  // The Metaspace edit of a normalized piece: spaces as the replacement, which is prepended as the
  // prepend scheme says (`first`: only to the piece that starts the input).
  MappedText ApplyMetaspace(MappedText piece) const;

  Bpe bpe_;
  std::optional<MetaspaceSpec> metaspace_;
  std::vector<DecoderStep> decoder_;  // Empty: byte-level (bytes_of_id_ holds decoded bytes).
  std::vector<AddedTokenSpec> added_;
  AddedTokenMatcher raw_matcher_;         // Added tokens matched in the input.
  AddedTokenMatcher normalized_matcher_;  // ... in the normalized text.
  std::vector<std::unique_ptr<Normalizer>> normalizers_;
  std::vector<std::unique_ptr<SplitPattern>> splits_;
  // Byte-level: the bytes each id decodes to; characters: its token string, for decoder_. None: no
  // token.
  std::vector<std::optional<std::string>> bytes_of_id_;
};

absl::StatusOr<std::unique_ptr<TokenizerPipeline>> TokenizerPipeline::Create(TokenizerSpec spec) {
  absl::StatusOr<Bpe> bpe = Bpe::Create(spec.model);
  if (!bpe.ok()) return bpe.status();
  std::unique_ptr<TokenizerPipeline> pipeline(new TokenizerPipeline(*std::move(bpe)));
  pipeline->description = spec.description;
  pipeline->metaspace_ = spec.metaspace;
  pipeline->decoder_ = spec.decoder;
  for (NormalizerSpec& step : spec.normalizers) {
    absl::StatusOr<std::unique_ptr<Normalizer>> normalizer = Normalizer::Create(std::move(step));
    if (!normalizer.ok()) return normalizer.status();
    pipeline->normalizers_.push_back(*std::move(normalizer));
  }
  for (const SplitSpec& split : spec.splits) {
    absl::StatusOr<std::unique_ptr<SplitPattern>> pattern =
        SplitPattern::Compile(split.pattern, split.literal);
    if (!pattern.ok()) return pattern.status();
    pipeline->splits_.push_back(*std::move(pattern));
  }
  int64_t size = 0;
  for (const auto& [token, id] : spec.model.vocab) size = std::max(size, id + 1);
  for (const AddedTokenSpec& added : spec.added_tokens) size = std::max(size, added.id + 1);
  pipeline->vocab_size = size;
  pipeline->bytes_of_id_.resize(static_cast<size_t>(size));
  for (const auto& [token, id] : spec.model.vocab) {
    std::string bytes;
    if (spec.model.alphabet == BpeAlphabet::kBytes) {
      ByteLevelDecode(token, &bytes);
    } else {
      bytes = token;
    }
    pipeline->bytes_of_id_[static_cast<size_t>(id)] = std::move(bytes);
  }
  pipeline->added_ = std::move(spec.added_tokens);
  for (size_t i = 0; i < pipeline->added_.size(); ++i) {
    const AddedTokenSpec& added = pipeline->added_[i];
    pipeline->bytes_of_id_[static_cast<size_t>(added.id)] = added.content;
    // As Hugging Face: a normalized added token is looked for in the normalized text, when there
    // is a normalizer.
    AddedTokenMatcher& matcher = added.normalized && !pipeline->normalizers_.empty()
                                     ? pipeline->normalized_matcher_
                                     : pipeline->raw_matcher_;
    matcher.Add(added.content, static_cast<int>(i));
  }
  for (const char* candidate : {"<|endoftext|>", "<|im_end|>", "</s>", "<|end_of_text|>"}) {
    if (pipeline->eos) break;
    for (const AddedTokenSpec& added : pipeline->added_) {
      if (added.content == candidate) {
        pipeline->eos = added.id;
        break;
      }
    }
  }
  for (const char* candidate : {"<|endoftext|>", "<|im_end|>", "</s>", "<|end_of_text|>"}) {
    if (pipeline->eos) break;
    const auto found = pipeline->bpe_.ids().find(candidate);
    if (found != pipeline->bpe_.ids().end()) pipeline->eos = found->second;
  }
  for (const char* candidate : {"<|begin_of_text|>", "<s>", "<|startoftext|>"}) {
    if (pipeline->bos) break;
    pipeline->bos = pipeline->IdOf(candidate);
  }
  return pipeline;
}

std::optional<int64_t> TokenizerPipeline::IdOf(const std::string& content) const {
  for (const AddedTokenSpec& added : added_) {
    if (added.content == content) return added.id;
  }
  const auto found = bpe_.ids().find(content);
  if (found != bpe_.ids().end()) return found->second;
  return std::nullopt;
}

std::vector<Section> TokenizerPipeline::SplitAdded(std::string_view text,
                                                   const AddedTokenMatcher& matcher,
                                                   const EncodeOptions& options) const {
  if (matcher.empty()) return {{0, text.size()}};
  std::vector<Section> sections = matcher.Split(text, [&](int index) {
    return options.special_tokens_as_text && added_[static_cast<size_t>(index)].special;
  });
  for (size_t i = 0; i < sections.size(); ++i) {
    if (sections[i].added < 0) continue;
    const AddedTokenSpec& added = added_[static_cast<size_t>(sections[i].added)];
    if (added.lstrip && i > 0 && sections[i - 1].added < 0) {
      Section& before = sections[i - 1];
      before.end = TrimWhiteSpace(text, before.begin, before.end);
      sections[i].begin = before.end;
    }
    if (added.rstrip && i + 1 < sections.size() && sections[i + 1].added < 0) {
      Section& after = sections[i + 1];
      after.begin = SkipWhiteSpace(text, after.begin, after.end);
      sections[i].end = after.begin;
    }
  }
  return sections;
}

absl::StatusOr<Encoding> TokenizerPipeline::Encode(std::string_view utf8,
                                                   const EncodeOptions& options) const {
  const MappedText text = RepairUtf8(utf8);
  Encoding out;
  for (const Section& section : SplitAdded(text.text, raw_matcher_, options)) {
    if (section.added >= 0) {
      out.ids.push_back(added_[static_cast<size_t>(section.added)].id);
      out.byte_offsets.push_back(text.OriginOf(section.begin, section.end));  // Never empty.
    } else if (section.end > section.begin) {
      if (absl::Status status =
              EncodeSection(text.Slice(section.begin, section.end), options, &out);
          !status.ok()) {
        return status;
      }
    }
  }
  return out;
}

absl::Status TokenizerPipeline::EncodeSection(const MappedText& section,
                                              const EncodeOptions& options, Encoding* out) const {
  MappedText normalized = section;
  for (const auto& normalizer : normalizers_) {
    absl::StatusOr<MappedText> next = normalizer->Normalize(normalized);
    if (!next.ok()) return next.status();
    normalized = *std::move(next);
  }
  for (const Section& part : SplitAdded(normalized.text, normalized_matcher_, options)) {
    if (part.added >= 0) {
      out->ids.push_back(added_[static_cast<size_t>(part.added)].id);
      out->byte_offsets.push_back(normalized.OriginOf(part.begin, part.end));
    } else if (part.end > part.begin && metaspace_) {
      const MappedText piece = ApplyMetaspace(normalized.Slice(part.begin, part.end));
      if (absl::Status status = EncodePieces(piece, 0, piece.text.size(), out); !status.ok())
        return status;
    } else if (part.end > part.begin) {
      if (absl::Status status = EncodePieces(normalized, part.begin, part.end, out); !status.ok())
        return status;
    }
  }
  return absl::OkStatus();
}

MappedText TokenizerPipeline::ApplyMetaspace(MappedText piece) const {
  piece = ReplaceText(piece, " ", metaspace_->replacement);
  const bool prepend =
      metaspace_->prepend_scheme == MetaspaceSpec::PrependScheme::kAlways ||
      (metaspace_->prepend_scheme == MetaspaceSpec::PrependScheme::kFirst &&
       piece.origin_begin.front() == 0);  // Hugging Face: the piece's original offset is 0.
  if (prepend && !piece.text.starts_with(metaspace_->replacement))
    piece = PrependText(piece, metaspace_->replacement);
  return piece;
}

absl::Status TokenizerPipeline::EncodePieces(const MappedText& text, size_t begin, size_t end,
                                             Encoding* out) const {
  std::vector<std::pair<size_t, size_t>> pieces = {{begin, end}};
  for (const auto& split : splits_) {
    std::vector<std::pair<size_t, size_t>> finer;
    for (const auto& [from, to] : pieces) {
      absl::StatusOr<std::vector<std::pair<size_t, size_t>>> parts =
          split->Split(std::string_view(text.text).substr(from, to - from));
      if (!parts.ok()) return parts.status();
      for (const auto& [a, b] : *parts) finer.emplace_back(from + a, from + b);
    }
    pieces = std::move(finer);
  }
  std::vector<WordToken> tokens;
  for (const auto& [from, to] : pieces) {
    tokens.clear();
    bpe_.Tokenize(std::string_view(text.text).substr(from, to - from), &tokens);
    for (const WordToken& token : tokens) {
      out->ids.push_back(token.id);
      out->byte_offsets.push_back(text.OriginOf(from + token.begin, from + token.end));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> TokenizerPipeline::Decode(const std::vector<int64_t>& ids) const {
  std::string bytes;
  std::vector<std::string> tokens;
  for (size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= vocab_size || !bytes_of_id_[static_cast<size_t>(id)].has_value()) {
      return InvalidArgumentError(
          {ErrorReason::kInvalidArgument, absl::StrCat("ids[", i, "]"), absl::StrCat(id),
           absl::StrCat("a token id of this tokenizer, in [0, ", vocab_size, ")")});
    }
    if (decoder_.empty()) {
      bytes.append(*bytes_of_id_[static_cast<size_t>(id)]);
    } else {
      tokens.push_back(*bytes_of_id_[static_cast<size_t>(id)]);
    }
  }
  if (!decoder_.empty()) return DecodeTokens(std::move(tokens), decoder_);
  return RepairUtf8String(bytes);
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerPipeline> pipeline)
    : pipeline_(std::move(pipeline)) {}
Tokenizer::~Tokenizer() = default;

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromTokenizerJson(
    std::string_view json_text, const LoadOptions& options) {
  absl::StatusOr<TokenizerSpec> spec = ParseTokenizerJson(json_text, options);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<TokenizerPipeline>> pipeline =
      TokenizerPipeline::Create(*std::move(spec));
  if (!pipeline.ok()) return pipeline.status();
  return std::unique_ptr<Tokenizer>(new Tokenizer(*std::move(pipeline)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromVocabAndMerges(
    std::string_view vocab_json, std::string_view merges_text, const LoadOptions& options) {
  absl::StatusOr<TokenizerSpec> spec = ParseVocabAndMerges(vocab_json, merges_text, options);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<TokenizerPipeline>> pipeline =
      TokenizerPipeline::Create(*std::move(spec));
  if (!pipeline.ok()) return pipeline.status();
  return std::unique_ptr<Tokenizer>(new Tokenizer(*std::move(pipeline)));
}

absl::StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::FromDirectory(const std::string& dir,
                                                                    const LoadOptions& options) {
  const std::filesystem::path root(dir);
  absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer;
  // files::HasEntry: a link out answers the same whether or not its target exists.
  const auto has = [&](const char* file) { return files::HasEntry((root / file).string()); };
  if (has("tokenizer.json")) {
    absl::StatusOr<std::string> text = ReadBounded(root / "tokenizer.json", options);
    if (!text.ok()) return text.status();
    tokenizer = FromTokenizerJson(*text, options);
  } else if (has("vocab.json") && has("merges.txt")) {
    absl::StatusOr<std::string> vocab = ReadBounded(root / "vocab.json", options);
    if (!vocab.ok()) return vocab.status();
    absl::StatusOr<std::string> merges = ReadBounded(root / "merges.txt", options);
    if (!merges.ok()) return merges.status();
    tokenizer = FromVocabAndMerges(*vocab, *merges, options);
  } else {
    return ErrorWithReason(
        absl::StatusCode::kNotFound, ErrorReason::kPathNotFound,
        absl::StrCat(files::ShownPath(options.scope, dir),
                     " holds no tokenizer: neither tokenizer.json nor vocab.json + merges.txt"));
  }
  if (!tokenizer.ok()) return tokenizer.status();
  if (has("tokenizer_config.json")) {
    absl::StatusOr<std::string> config = ReadBounded(root / "tokenizer_config.json", options);
    if (!config.ok()) return config.status();
    for (auto [key, slot] : {std::pair{"eos_token", &(*tokenizer)->pipeline_->eos},
                             std::pair{"bos_token", &(*tokenizer)->pipeline_->bos}}) {
      absl::StatusOr<std::string> named = SpecialTokenOfConfig(*config, key, options);
      if (!named.ok()) return named.status();
      if (!named->empty()) {
        if (const std::optional<int64_t> id = (*tokenizer)->pipeline_->IdOf(*named)) *slot = id;
      }
    }
  }
  return tokenizer;
}

absl::StatusOr<Encoding> Tokenizer::Encode(std::string_view utf8,
                                           const EncodeOptions& options) const {
  return pipeline_->Encode(utf8, options);
}

absl::StatusOr<std::string> Tokenizer::Decode(const std::vector<int64_t>& ids) const {
  return pipeline_->Decode(ids);
}

int64_t Tokenizer::vocab_size() const { return pipeline_->vocab_size; }
std::optional<int64_t> Tokenizer::eos_token_id() const { return pipeline_->eos; }
std::optional<int64_t> Tokenizer::bos_token_id() const { return pipeline_->bos; }
const std::string& Tokenizer::description() const { return pipeline_->description; }

}  // namespace posbias::tokenizer
