#include "server/tokenizer/tokenizer_spec.h"

#include <algorithm>
#include <cctype>

#include <nlohmann/json.hpp>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/jsontext/bounded_json.h"
#include "server/status/error.h"
#include "server/tokenizer/utf8.h"

namespace posbias::tokenizer {
namespace {

using nlohmann::json;

constexpr const char* kSupported =
    "supported: byte-level BPE (tokenizer.json with model BPE, a ByteLevel pre-tokenizer "
    "optionally after Split steps, a ByteLevel decoder, normalizer NFC or NFKC; or GPT-2's "
    "vocab.json + merges.txt) and SentencePiece-style BPE (tokenizer.json with model BPE over "
    "characters, optionally with byte_fallback; normalizers Prepend, Replace with a String "
    "pattern, NFC, NFKC; pre-tokenizer none, Metaspace or Split; decoder Metaspace or a Sequence "
    "of Replace, ByteFallback, Fuse and Strip)";

// U+2581 LOWER ONE EIGHTH BLOCK, SentencePiece's space.
constexpr std::string_view kMetaspace = "\xE2\x96\x81";

absl::Status FileError(const char* file, const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                         absl::StrCat(file, ": ", message));
}

absl::Status Unsupported(const char* file, const std::string& what) {
  return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented,
                         absl::StrCat(file, ": ", what, " is not supported; ", kSupported));
}

// Parses `text` in linear time (jsontext/bounded_json.h), refusing files over the size bound and
// nesting over the depth bound while parsing (no recursion can run away), as config.json is.
absl::StatusOr<json> ParseBounded(const char* file, std::string_view text,
                                  const LoadOptions& options) {
  if (text.size() > options.max_file_bytes) {
    return FileError(file,
                     absl::StrCat("has ", text.size(), " bytes; at most ", options.max_file_bytes));
  }
  jsontext::ParseBounds bounds;
  bounds.max_depth = options.max_json_depth;
  jsontext::Parsed parsed = jsontext::Parse(text, bounds);
  if (parsed.outcome != jsontext::ParseOutcome::kOk) return FileError(file, jsontext::Describe(parsed, bounds));
  if (!parsed.value.is_object()) return FileError(file, "is not a JSON object");
  return std::move(parsed.value);
}

// A component's "type", quoted in messages only when it is a short identifier (a type name);
// anything else reads "(not a type name)", so a message never carries other text of a file.
std::string TypeOf(const json& component) {
  if (!component.is_object()) return "";
  const auto type = component.find("type");
  if (type == component.end() || !type->is_string()) return "";
  const std::string name = type->get<std::string>();
  const bool identifier = !name.empty() && name.size() <= 40 &&
                          std::all_of(name.begin(), name.end(), [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; });
  return identifier ? name : "(not a type name)";
}

bool IsNullOr(const json& object, const char* key, const json& allowed) {
  const auto found = object.find(key);
  return found == object.end() || found->is_null() || *found == allowed;
}

// `where` names the token by its place (never by its text: errors must not quote a file).
absl::StatusOr<int64_t> TokenId(const char* file, const json& id, const std::string& where) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= kMaxTokenId) {
    return FileError(file, absl::StrCat(where, " has id ", id.is_number() ? id.dump() : "that is not a number",
                                        "; allowed an integer in [0, ", kMaxTokenId, ")"));
  }
  return id.get<int64_t>();
}

absl::Status ReadVocab(const char* file, const json& vocab, BpeModelSpec* model) {
  if (!vocab.is_object()) return FileError(file, "the vocabulary is not an object of token → id");
  std::set<int64_t> seen;
  model->vocab.reserve(vocab.size());
  size_t entry = 0;
  for (const auto& [token, id] : vocab.items()) {
    absl::StatusOr<int64_t> value = TokenId(file, id, absl::StrCat("vocabulary entry ", entry++, " (in key order)"));
    if (!value.ok()) return value.status();
    if (!seen.insert(*value).second)
      return FileError(file, absl::StrCat("id ", *value, " appears twice in the vocabulary"));
    model->vocab.emplace_back(token, *value);
  }
  return absl::OkStatus();
}

absl::Status ReadModel(const json& model, TokenizerSpec* spec) {
  constexpr const char* file = "tokenizer.json";
  const std::string type = TypeOf(model);
  if (type != "BPE") return Unsupported(file, absl::StrCat("model type '", type, "'"));
  if (!IsNullOr(model, "dropout", 0.0)) return Unsupported(file, "BPE dropout");
  if (!IsNullOr(model, "continuing_subword_prefix", ""))
    return Unsupported(file, "a continuing_subword_prefix");
  if (!IsNullOr(model, "end_of_word_suffix", "")) return Unsupported(file, "an end_of_word_suffix");
  if (absl::Status status = ReadVocab(file, model.value("vocab", json()), &spec->model);
      !status.ok())
    return status;
  const json merges = model.value("merges", json::array());
  if (!merges.is_array()) return FileError(file, "model.merges is not an array");
  spec->model.merges.reserve(merges.size());
  size_t rank = 0;
  for (const json& merge : merges) {
    const size_t at = rank++;
    if (merge.is_string()) {
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return FileError(
            file, absl::StrCat("model.merges[", at, "]: expected two tokens separated by one space"));
      }
      spec->model.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {
      spec->model.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {
      return FileError(
          file, absl::StrCat("model.merges[", at, "]: expected \"a b\" or [\"a\", \"b\"]"));
    }
  }
  const json unk = model.value("unk_token", json());
  if (unk.is_string()) spec->model.unk_token = unk.get<std::string>();
  spec->model.ignore_merges = model.value("ignore_merges", false);
  spec->model.byte_fallback = model.value("byte_fallback", json(false)).is_boolean() &&
                              model.value("byte_fallback", false);
  spec->model.fuse_unk = model.value("fuse_unk", json(false)).is_boolean() &&
                         model.value("fuse_unk", false);
  return absl::OkStatus();
}

absl::Status ReadNormalizer(const json& normalizer, TokenizerSpec* spec,
                            std::vector<std::string>* names) {
  if (normalizer.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(normalizer);
  if (type == "Sequence") {
    for (const json& step : normalizer.value("normalizers", json::array())) {
      if (absl::Status status = ReadNormalizer(step, spec, names); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  if (type == "NFC") {
    spec->normalizers.push_back({NormalizerSpec::Kind::kNfc, "", ""});
  } else if (type == "NFKC") {
    spec->normalizers.push_back({NormalizerSpec::Kind::kNfkc, "", ""});
  } else if (type == "Prepend") {
    const json prepend = normalizer.value("prepend", json());
    if (!prepend.is_string() || prepend.get<std::string>().empty())
      return FileError("tokenizer.json", "a Prepend normalizer has no `prepend` text");
    spec->normalizers.push_back({NormalizerSpec::Kind::kPrepend, "", prepend.get<std::string>()});
  } else if (type == "Replace") {
    const json pattern = normalizer.value("pattern", json());
    const json content = normalizer.value("content", json());
    if (pattern.is_object() && pattern.contains("Regex"))
      return Unsupported("tokenizer.json", "a Replace normalizer with a Regex pattern");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        pattern["String"].get<std::string>().empty() || !content.is_string()) {
      return FileError("tokenizer.json",
                       "a Replace normalizer needs a non-empty String pattern and a content");
    }
    spec->normalizers.push_back({NormalizerSpec::Kind::kReplace,
                                 pattern["String"].get<std::string>(), content.get<std::string>()});
  } else {
    return Unsupported("tokenizer.json", absl::StrCat("normalizer '", type, "'"));
  }
  names->push_back(type);
  return absl::OkStatus();
}

// One UTF-8 character as a PCRE2 escape, \x{HEX}, usable inside a character class too.
std::string RegexCharacter(std::string_view character) {
  const auto lead = static_cast<uint8_t>(character[0]);
  uint32_t code_point = character.size() == 1 ? lead : lead & (0x7F >> character.size());
  for (size_t k = 1; k < character.size(); ++k)
    code_point = (code_point << 6) | (static_cast<uint8_t>(character[k]) & 0x3F);
  return absl::StrCat("\\x{", absl::Hex(code_point), "}");
}

// One character of UTF-8 (the Metaspace replacement).
bool IsOneCharacter(const std::string& text) {
  return !text.empty() && RepairUtf8String(text) == text && Utf8CharLength(text, 0) == text.size();
}

// Metaspace's replacement and prepend scheme: `prepend_scheme` ("always", "first", "never"), or in
// files written before it, `add_prefix_space` (true: always).
absl::StatusOr<MetaspaceSpec> ReadMetaspace(const json& step) {
  constexpr const char* file = "tokenizer.json";
  MetaspaceSpec metaspace;
  const json replacement = step.value("replacement", json(std::string(kMetaspace)));
  if (!replacement.is_string() || !IsOneCharacter(replacement.get<std::string>()))
    return FileError(file, "the Metaspace replacement is not one character");
  metaspace.replacement = replacement.get<std::string>();
  const json scheme = step.value("prepend_scheme", json());
  if (scheme.is_null()) {
    metaspace.prepend_scheme = step.value("add_prefix_space", true)
                                   ? MetaspaceSpec::PrependScheme::kAlways
                                   : MetaspaceSpec::PrependScheme::kNever;
  } else if (scheme == "always") {
    metaspace.prepend_scheme = MetaspaceSpec::PrependScheme::kAlways;
  } else if (scheme == "first") {
    metaspace.prepend_scheme = MetaspaceSpec::PrependScheme::kFirst;
  } else if (scheme == "never") {
    metaspace.prepend_scheme = MetaspaceSpec::PrependScheme::kNever;
  } else {
    return FileError(file, absl::StrCat("Metaspace prepend_scheme ", scheme.dump(),
                                        " is none of \"always\", \"first\", \"never\""));
  }
  return metaspace;
}

// The decoder of SentencePiece-style BPE: one step or a Sequence of them.
absl::Status ReadDecoder(const json& decoder, TokenizerSpec* spec, std::vector<std::string>* names) {
  constexpr const char* file = "tokenizer.json";
  const std::string type = TypeOf(decoder);
  if (type == "Sequence") {
    for (const json& step : decoder.value("decoders", json::array())) {
      if (TypeOf(step) == "Sequence") return Unsupported(file, "a decoder Sequence inside a Sequence");
      if (absl::Status status = ReadDecoder(step, spec, names); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  DecoderStep step;
  if (type == "Replace") {
    const json pattern = decoder.value("pattern", json());
    const json content = decoder.value("content", json());
    if (pattern.is_object() && pattern.contains("Regex"))
      return Unsupported(file, "a Replace decoder with a Regex pattern");
    if (!pattern.is_object() || !pattern.contains("String") || !pattern["String"].is_string() ||
        pattern["String"].get<std::string>().empty() || !content.is_string()) {
      return FileError(file, "a Replace decoder needs a non-empty String pattern and a content");
    }
    step.kind = DecoderStep::Kind::kReplace;
    step.pattern = pattern["String"].get<std::string>();
    step.content = content.get<std::string>();
  } else if (type == "ByteFallback") {
    step.kind = DecoderStep::Kind::kByteFallback;
  } else if (type == "Fuse") {
    step.kind = DecoderStep::Kind::kFuse;
  } else if (type == "Strip") {
    const json content = decoder.value("content", json());
    const json start = decoder.value("start", json(0)), stop = decoder.value("stop", json(0));
    if (!content.is_string() || !IsOneCharacter(content.get<std::string>()) ||
        !start.is_number_unsigned() || !stop.is_number_unsigned()) {
      return FileError(file, "a Strip decoder needs one character `content` and counts `start`, `stop`");
    }
    step.kind = DecoderStep::Kind::kStrip;
    step.pattern = content.get<std::string>();
    step.start = start.get<size_t>();
    step.stop = stop.get<size_t>();
  } else if (type == "Metaspace") {
    absl::StatusOr<MetaspaceSpec> metaspace = ReadMetaspace(decoder);
    if (!metaspace.ok()) return metaspace.status();
    step.kind = DecoderStep::Kind::kMetaspace;
    step.pattern = metaspace->replacement;
    step.strip_first = metaspace->prepend_scheme != MetaspaceSpec::PrependScheme::kNever;
  } else {
    return Unsupported(file, absl::StrCat("decoder '", type.empty() ? "null" : type,
                                          "' for a BPE without a ByteLevel pre-tokenizer"));
  }
  spec->decoder.push_back(std::move(step));
  names->push_back(type);
  return absl::OkStatus();
}

// The pre-tokenizer of byte-level BPE ends in ByteLevel; Split steps may come before it. Without
// ByteLevel the BPE runs over characters: Metaspace (first) and Split steps, or none at all.
// `*byte_level` says whether ByteLevel was found.
absl::Status ReadPreTokenizer(const json& pre_tokenizer, TokenizerSpec* spec,
                              std::vector<std::string>* names, bool* byte_level) {
  constexpr const char* file = "tokenizer.json";
  if (pre_tokenizer.is_null()) return absl::OkStatus();
  const std::string type = TypeOf(pre_tokenizer);
  if (*byte_level)
    return Unsupported(file, absl::StrCat("a pre-tokenizer step after ByteLevel ('", type, "')"));
  if (type == "Sequence") {
    for (const json& step : pre_tokenizer.value("pretokenizers", json::array())) {
      if (absl::Status status = ReadPreTokenizer(step, spec, names, byte_level); !status.ok())
        return status;
    }
    return absl::OkStatus();
  }
  if (type == "ByteLevel") {
    if (spec->metaspace) return Unsupported(file, "a ByteLevel pre-tokenizer after Metaspace");
    if (pre_tokenizer.value("add_prefix_space", false))
      return Unsupported(file, "ByteLevel add_prefix_space = true");
    if (pre_tokenizer.value("use_regex", true))
      spec->splits.push_back({std::string(kGpt2SplitRegex), false});
    *byte_level = true;
  } else if (type == "Metaspace") {
    if (spec->metaspace || !spec->splits.empty())
      return Unsupported(file, "a Metaspace pre-tokenizer that is not the first step");
    absl::StatusOr<MetaspaceSpec> metaspace = ReadMetaspace(pre_tokenizer);
    if (!metaspace.ok()) return metaspace.status();
    spec->metaspace = *metaspace;
    // Its split (MergedWithNext on the replacement): each replacement starts a new piece.
    if (pre_tokenizer.value("split", true)) {
      const std::string r = RegexCharacter(metaspace->replacement);
      spec->splits.push_back({absl::StrCat(r, "[^", r, "]*|[^", r, "]+"), false});
    }
  } else if (type == "Split") {
    const std::string behavior = pre_tokenizer.value("behavior", "");
    if (pre_tokenizer.value("invert", false)) return Unsupported(file, "Split invert = true");
    const json pattern = pre_tokenizer.value("pattern", json());
    // MergedWithPrevious on one character c (Gemma 3's Split on " "): each c ends the piece
    // before it, as the pieces of the regex [^c]*c|[^c]+.
    if (behavior == "MergedWithPrevious" && pattern.contains("String") && pattern["String"].is_string() &&
        IsOneCharacter(pattern["String"].get<std::string>())) {
      const std::string c = RegexCharacter(pattern["String"].get<std::string>());
      spec->splits.push_back({absl::StrCat("[^", c, "]*", c, "|[^", c, "]+"), false});
      names->push_back(type);
      return absl::OkStatus();
    }
    if (behavior != "Isolated") {
      return Unsupported(file, absl::StrCat("Split behavior '", behavior, "'",
                                            behavior == "MergedWithPrevious" ? " on a pattern other than one character" : ""));
    }
    if (pattern.contains("Regex") && pattern["Regex"].is_string()) {
      spec->splits.push_back({pattern["Regex"].get<std::string>(), false});
    } else if (pattern.contains("String") && pattern["String"].is_string()) {
      spec->splits.push_back({pattern["String"].get<std::string>(), true});
    } else {
      return FileError(file, "a Split pre-tokenizer has neither a Regex nor a String pattern");
    }
  } else {
    return Unsupported(file, absl::StrCat("pre-tokenizer '", type.empty() ? "null" : type, "'"));
  }
  names->push_back(type);
  return absl::OkStatus();
}

absl::Status ReadAddedTokens(const json& added, TokenizerSpec* spec) {
  constexpr const char* file = "tokenizer.json";
  if (added.is_null()) return absl::OkStatus();
  if (!added.is_array()) return FileError(file, "added_tokens is not an array");
  size_t index = 0;
  for (const json& token : added) {
    const std::string where = absl::StrCat("added_tokens[", index++, "]");
    if (!token.is_object() || !token.contains("content") || !token["content"].is_string() ||
        token["content"].get<std::string>().empty()) {
      return FileError(file, absl::StrCat(where, " has no content; expected a non-empty string"));
    }
    AddedTokenSpec spec_token;
    spec_token.content = token["content"].get<std::string>();
    absl::StatusOr<int64_t> id = TokenId(file, token.value("id", json()), where);
    if (!id.ok()) return id.status();
    spec_token.id = *id;
    spec_token.special = token.value("special", false);
    spec_token.normalized = token.value("normalized", !spec_token.special);
    spec_token.lstrip = token.value("lstrip", false);
    spec_token.rstrip = token.value("rstrip", false);
    if (token.value("single_word", false)) {
      return Unsupported(
          file, absl::StrCat(where, " with single_word = true"));
    }
    spec->added_tokens.push_back(std::move(spec_token));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<TokenizerSpec> ParseTokenizerJson(std::string_view json_text,
                                                 const LoadOptions& options) {
  constexpr const char* file = "tokenizer.json";
  absl::StatusOr<json> parsed = ParseBounded(file, json_text, options);
  if (!parsed.ok()) return parsed.status();
  const json& root = *parsed;
  TokenizerSpec spec;
  try {
    if (absl::Status status = ReadModel(root.value("model", json()), &spec); !status.ok())
      return status;
    std::vector<std::string> normalizers, pre_tokenizers;
    if (absl::Status status = ReadNormalizer(root.value("normalizer", json()), &spec, &normalizers);
        !status.ok()) {
      return status;
    }
    bool byte_level = false;
    if (absl::Status status = ReadPreTokenizer(root.value("pre_tokenizer", json()), &spec,
                                               &pre_tokenizers, &byte_level);
        !status.ok()) {
      return status;
    }
    std::vector<std::string> decoders;
    if (byte_level) {
      if (spec.model.byte_fallback)
        return Unsupported(file, "BPE byte_fallback with a ByteLevel pre-tokenizer");
      const std::string decoder = TypeOf(root.value("decoder", json()));
      if (decoder != "ByteLevel") {
        return Unsupported(file, absl::StrCat("decoder '", decoder.empty() ? "null" : decoder,
                                              "' for byte-level BPE"));
      }
    } else {
      spec.model.alphabet = BpeAlphabet::kCharacters;
      if (absl::Status status = ReadDecoder(root.value("decoder", json()), &spec, &decoders);
          !status.ok()) {
        return status;
      }
    }
    if (absl::Status status = ReadAddedTokens(root.value("added_tokens", json()), &spec);
        !status.ok())
      return status;
    spec.description = absl::StrCat(
        byte_level ? "byte-level" : "SentencePiece-style", " BPE from tokenizer.json (",
        spec.model.vocab.size(), " tokens, ", spec.model.merges.size(), " merges, ",
        spec.added_tokens.size(), " added tokens", spec.model.byte_fallback ? ", byte fallback" : "",
        "; normalizer ", normalizers.empty() ? "none" : absl::StrJoin(normalizers, "+"),
        "; pre-tokenizer ", pre_tokenizers.empty() ? "none" : absl::StrJoin(pre_tokenizers, "+"),
        byte_level ? "" : absl::StrCat("; decoder ", absl::StrJoin(decoders, "+")), ")");
  } catch (const json::exception& error) {  // A field of the wrong JSON type.
    return FileError(file, error.what());
  }
  return spec;
}

absl::StatusOr<TokenizerSpec> ParseVocabAndMerges(std::string_view vocab_json,
                                                  std::string_view merges_text,
                                                  const LoadOptions& options) {
  absl::StatusOr<json> vocab = ParseBounded("vocab.json", vocab_json, options);
  if (!vocab.ok()) return vocab.status();
  if (merges_text.size() > options.max_file_bytes) {
    return FileError("merges.txt", absl::StrCat("has ", merges_text.size(), " bytes; at most ",
                                                options.max_file_bytes));
  }
  TokenizerSpec spec;
  if (absl::Status status = ReadVocab("vocab.json", *vocab, &spec.model); !status.ok())
    return status;
  // Hugging Face's reading of merges.txt: "#version" lines and empty lines are skipped, every other
  // line is two tokens separated by one space.
  size_t line_number = 0;
  for (size_t at = 0; at < merges_text.size();) {
    size_t end = merges_text.find('\n', at);
    if (end == std::string_view::npos) end = merges_text.size();
    std::string_view line = merges_text.substr(at, end - at);
    at = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line.starts_with("#version")) continue;
    const size_t space = line.find(' ');
    if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos) {
      return FileError("merges.txt", absl::StrCat("line ", line_number,
                                                  " is not two tokens separated by one space"));
    }
    spec.model.merges.emplace_back(std::string(line.substr(0, space)),
                                   std::string(line.substr(space + 1)));
  }
  spec.splits.push_back({std::string(kGpt2SplitRegex), false});
  for (const auto& [token, id] : spec.model.vocab) {
    if (token == "<|endoftext|>")
      spec.added_tokens.push_back({id, token, true, false, false, false});
  }
  spec.description =
      absl::StrCat("byte-level BPE from vocab.json + merges.txt (", spec.model.vocab.size(),
                   " tokens, ", spec.model.merges.size(), " merges; GPT-2 pre-tokenizer)");
  return spec;
}

absl::StatusOr<std::string> SpecialTokenOfConfig(std::string_view config_json, std::string_view key,
                                                 const LoadOptions& options) {
  absl::StatusOr<json> config = ParseBounded("tokenizer_config.json", config_json, options);
  if (!config.ok()) return config.status();
  const json token = config->value(std::string(key), json());
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content") && token["content"].is_string())
    return token["content"].get<std::string>();
  return std::string();
}

}  // namespace posbias::tokenizer
