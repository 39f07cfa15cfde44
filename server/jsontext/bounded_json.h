// Untrusted JSON text (safetensors headers and index files, config.json, tokenizer.json, the
// tokens file) parsed in time linear in its size, with the bounds a shared server needs. Nesting
// deeper than ParseBounds::max_depth and objects or arrays of more than ParseBounds::max_entries
// are refused while parsing, before any recursive walk or destructor could exhaust the stack and
// before a huge document is built. Every ParseBounds::stop_every tokens the caller is asked
// whether to stop (a deadline, a cancelled call, the server shutting down), so a large text never
// holds a thread past them. A syntax error (NaN, Infinity and a NUL byte included: they are not
// JSON) reports its byte offset. The keys of the top-level object may be watched as they are read (duplicates,
// which the DOM keeps only once, can only be seen then).
// Why not nlohmann's callback parser: after each nested object it walks its parent's entries
// looking for a discarded value, which is quadratic in the number of entries (a 32k-tensor
// safetensors header took 13 s). The filter here forwards every event to nlohmann's own linear
// DOM builder.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "nlohmann/json.hpp"

namespace posbias::jsontext {

struct ParseBounds {
  int max_depth = 64;  // Arrays and objects open at once; the outermost value is depth 1.
  // Asked every `stop_every` tokens; true ends the parse (ParseOutcome::kStopped). Empty = never.
  std::function<bool()> stop;
  int64_t stop_every = 4096;
  // Entries of one object or array (keys, or elements); more is ParseOutcome::kTooManyEntries,
  // found while parsing, so a huge list is refused before the document is built.
  int64_t max_entries = int64_t{1} << 20;
  // Called with each key of the top-level object, in text order (duplicates included).
  std::function<void(const std::string&)> top_level_key;
};

enum class ParseOutcome { kOk, kSyntaxError, kTooDeep, kTooManyEntries, kStopped };

struct Parsed {
  ParseOutcome outcome = ParseOutcome::kOk;
  nlohmann::json value;  // The document when kOk; null otherwise.
  size_t byte = 0;       // kSyntaxError: the offset (1-based, as nlohmann counts) where it was found.
  int64_t tokens = 0;    // Tokens read (values, keys, brackets): the work done.
};

Parsed Parse(std::string_view text, const ParseBounds& bounds);

// "is not valid JSON: a syntax error at byte N ..." / "is nested deeper than D levels" / "has an
// object or array of more than E entries" / "was not parsed: stopped after N tokens": the outcome
// in words for a caller's message ("" for kOk).
std::string Describe(const Parsed& parsed, const ParseBounds& bounds);

}  // namespace posbias::jsontext
