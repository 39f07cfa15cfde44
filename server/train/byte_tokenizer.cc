// The byte-level tokenizer files (byte_tokenizer.h).
#include "server/train/byte_tokenizer.h"

#include <filesystem>
#include <fstream>
#include <system_error>

#include "nlohmann/json.hpp"

namespace posbias::train {
namespace {

// A code point below U+0800 as UTF-8 (all GPT-2 byte symbols are below U+0144).
std::string Utf8(uint32_t code_point) {
  std::string out;
  if (code_point < 0x80) {
    out.push_back(static_cast<char>(code_point));
  } else {
    out.push_back(static_cast<char>(0xC0 | (code_point >> 6)));
    out.push_back(static_cast<char>(0x80 | (code_point & 0x3F)));
  }
  return out;
}

bool StandsForItself(uint8_t byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || byte >= 0xAE;
}

absl::Status WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError("cannot write " + path.string());
  return absl::OkStatus();
}

}  // namespace

// bytes_to_unicode: bytes that are printable keep their code point; the others, in byte order,
// take U+0100, U+0101, ...
std::string ByteLevelSymbol(uint8_t byte) {
  if (StandsForItself(byte)) return Utf8(byte);
  uint32_t shifted = 0;
  for (uint32_t b = 0; b < byte; ++b) shifted += StandsForItself(static_cast<uint8_t>(b)) ? 0 : 1;
  return Utf8(256 + shifted);
}

std::string ByteLevelTokenizerJson() {
  using json = nlohmann::ordered_json;
  json vocab = json::object();
  for (int byte = 0; byte < 256; ++byte) vocab[ByteLevelSymbol(static_cast<uint8_t>(byte))] = byte;
  json byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}};
  json file = {
      {"version", "1.0"},
      {"truncation", nullptr},
      {"padding", nullptr},
      {"added_tokens", json::array({{{"id", kByteLevelEosId}, {"content", kByteLevelEosToken},
                                     {"single_word", false}, {"lstrip", false}, {"rstrip", false},
                                     {"normalized", false}, {"special", true}}})},
      {"normalizer", nullptr},
      {"pre_tokenizer", byte_level},
      {"post_processor", nullptr},
      {"decoder", byte_level},
      {"model", {{"type", "BPE"}, {"dropout", nullptr}, {"unk_token", nullptr},
                 {"continuing_subword_prefix", nullptr}, {"end_of_word_suffix", nullptr},
                 {"fuse_unk", false}, {"byte_fallback", false}, {"vocab", vocab}, {"merges", json::array()}}}};
  return file.dump(1) + "\n";
}

std::string ByteLevelTokenizerConfigJson() {
  nlohmann::ordered_json config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                                   {"eos_token", kByteLevelEosToken},
                                   {"bos_token", kByteLevelEosToken},
                                   {"add_prefix_space", false}};
  return config.dump(1) + "\n";
}

absl::Status WriteByteLevelTokenizer(const std::string& dir) {
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) return absl::InternalError("cannot create " + dir + ": " + error.message());
  if (auto status = WriteFile(std::filesystem::path(dir) / "tokenizer.json", ByteLevelTokenizerJson()); !status.ok()) {
    return status;
  }
  return WriteFile(std::filesystem::path(dir) / "tokenizer_config.json", ByteLevelTokenizerConfigJson());
}

}  // namespace posbias::train
