#include "server/jsontext/bounded_json.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace posbias::jsontext {
namespace {

using Json = nlohmann::json;
using Dom = nlohmann::detail::json_sax_dom_parser<Json>;

// Forwards each SAX event to nlohmann's DOM builder after counting it against the bounds.
// Returning false from an event ends the parse (sax_parse returns false).
class BoundedSax {
 public:
  BoundedSax(Json& result, const ParseBounds& bounds, Parsed& parsed)
      : dom_(result, /*allow_exceptions=*/false), bounds_(bounds), parsed_(parsed) {}

  bool null() { return Value() && dom_.null(); }
  bool boolean(bool value) { return Value() && dom_.boolean(value); }
  bool number_integer(Json::number_integer_t value) { return Value() && dom_.number_integer(value); }
  bool number_unsigned(Json::number_unsigned_t value) { return Value() && dom_.number_unsigned(value); }
  bool number_float(Json::number_float_t value, const Json::string_t& text) {
    return Value() && dom_.number_float(value, text);
  }
  bool string(Json::string_t& value) { return Value() && dom_.string(value); }
  bool binary(Json::binary_t& value) { return Value() && dom_.binary(value); }
  bool start_object(std::size_t size) { return Open(/*array=*/false) && dom_.start_object(size); }
  bool key(Json::string_t& value) {
    if (!Count() || !Entry()) return false;
    if (open_.size() == 1 && bounds_.top_level_key) bounds_.top_level_key(value);
    return dom_.key(value);
  }
  bool end_object() {
    open_.pop_back();
    return Count() && dom_.end_object();
  }
  bool start_array(std::size_t size) { return Open(/*array=*/true) && dom_.start_array(size); }
  bool end_array() {
    open_.pop_back();
    return Count() && dom_.end_array();
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/, const nlohmann::detail::exception& /*error*/) {
    parsed_.outcome = ParseOutcome::kSyntaxError;
    parsed_.byte = position;
    return false;
  }

 private:
  bool Count() {
    ++parsed_.tokens;
    if (bounds_.stop && bounds_.stop_every > 0 && parsed_.tokens % bounds_.stop_every == 0 && bounds_.stop()) {
      parsed_.outcome = ParseOutcome::kStopped;
      return false;
    }
    return true;
  }
  // One more entry of the innermost container (a key of an object, an element of an array).
  bool Entry() {
    if (!open_.empty() && ++open_.back().entries > bounds_.max_entries) {
      parsed_.outcome = ParseOutcome::kTooManyEntries;
      return false;
    }
    return true;
  }
  // A value begins: an element when the innermost container is an array (an object's values
  // were counted with their keys).
  bool Value() { return Count() && (open_.empty() || !open_.back().array || Entry()); }
  bool Open(bool array) {
    if (!Value()) return false;
    if (static_cast<int>(open_.size()) >= bounds_.max_depth) {
      parsed_.outcome = ParseOutcome::kTooDeep;
      return false;
    }
    open_.push_back({array, 0});
    return true;
  }

  Dom dom_;
  const ParseBounds& bounds_;
  Parsed& parsed_;
  struct Container {
    bool array;
    int64_t entries;
  };
  std::vector<Container> open_;  // The containers open now, outermost first.
};

}  // namespace

Parsed Parse(std::string_view text, const ParseBounds& bounds) {
  Parsed parsed;
  // nlohmann::json stops at a NUL byte as if the text ended there: a NUL is a syntax error at it.
  if (const size_t nul = text.find('\0'); nul != std::string_view::npos) {
    parsed.outcome = ParseOutcome::kSyntaxError;
    parsed.byte = nul + 1;
    return parsed;
  }
  Json result;
  BoundedSax sax(result, bounds, parsed);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &sax, nlohmann::detail::input_format_t::json,
                                  /*strict=*/true);
  if (ok && parsed.outcome == ParseOutcome::kOk) {
    parsed.value = std::move(result);
  } else if (parsed.outcome == ParseOutcome::kOk) {
    parsed.outcome = ParseOutcome::kSyntaxError;  // The builder refused a value (never for JSON text).
  }
  return parsed;
}

std::string Describe(const Parsed& parsed, const ParseBounds& bounds) {
  switch (parsed.outcome) {
    case ParseOutcome::kOk: return "";
    case ParseOutcome::kSyntaxError:
      return absl::StrCat("is not valid JSON: a syntax error at byte ", parsed.byte,
                          " (NaN, Infinity, comments and trailing commas are not JSON)");
    case ParseOutcome::kTooDeep: return absl::StrCat("is nested deeper than ", bounds.max_depth, " levels");
    case ParseOutcome::kTooManyEntries:
      return absl::StrCat("has an object or array of more than ", bounds.max_entries, " entries");
    case ParseOutcome::kStopped: return absl::StrCat("was not parsed: stopped after ", parsed.tokens, " tokens");
  }
  return "";
}

}  // namespace posbias::jsontext
