// tokenize_dump: tokenizes a corpus line by line with posbias's tokenizer, for the conformance
// tests (compare_references.mjs) to hold against the reference tokenizers.
//
//   tokenize_dump --tokenizer-dir DIR --corpus FILE [--special-tokens-as-text]
//
// The corpus is read as bytes and split at '\n' (a final empty line after the last '\n' is none);
// each line is encoded as it is, invalid UTF-8 included. Prints one JSON object per line,
// {"line": n, "ids": [...], "offsets": [[begin, end], ...], "decoded": "..."} (n from 1), then one
// more with "line": 0 for the whole corpus as one text.
#include <CLI/CLI.hpp>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "server/tokenizer/tokenizer.h"

namespace {

int Dump(const posbias::tokenizer::Tokenizer& tokenizer, size_t line, const std::string& text,
         const posbias::tokenizer::EncodeOptions& options) {
  const auto encoding = tokenizer.Encode(text, options);
  if (!encoding.ok()) {
    std::cerr << "line " << line << ": " << encoding.status() << "\n";
    return 1;
  }
  const auto decoded = tokenizer.Decode(encoding->ids);
  if (!decoded.ok()) {
    std::cerr << "line " << line << ": " << decoded.status() << "\n";
    return 1;
  }
  nlohmann::json record = {{"line", line}, {"ids", encoding->ids}, {"decoded", *decoded}};
  record["offsets"] = nlohmann::json::array();
  for (const auto& [begin, end] : encoding->byte_offsets) record["offsets"].push_back({begin, end});
  std::cout << record.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Tokenizes a corpus line by line, one JSON line of ids per corpus line");
  std::string dir, corpus_path;
  posbias::tokenizer::EncodeOptions options;
  app.add_option("--tokenizer-dir", dir, "checkpoint directory with the tokenizer files")
      ->required();
  app.add_option("--corpus", corpus_path, "the corpus, one text per line")->required();
  app.add_flag("--special-tokens-as-text", options.special_tokens_as_text,
               "tokenize special added tokens as plain text");
  CLI11_PARSE(app, argc, argv);

  const auto tokenizer = posbias::tokenizer::Tokenizer::FromDirectory(dir);
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
    return 2;
  }
  std::cerr << (*tokenizer)->description() << "\n";
  std::ifstream in(corpus_path, std::ios::binary);
  const std::string corpus((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (!in.good() && !in.eof()) {
    std::cerr << "cannot read " << corpus_path << "\n";
    return 2;
  }
  size_t line = 0;
  for (size_t at = 0; at < corpus.size();) {
    size_t end = corpus.find('\n', at);
    if (end == std::string::npos) end = corpus.size();
    if (Dump(**tokenizer, ++line, corpus.substr(at, end - at), options) != 0) return 1;
    at = end + 1;
  }
  return Dump(**tokenizer, 0, corpus, options);
}
