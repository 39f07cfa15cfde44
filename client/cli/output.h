// Output of the posbias CLI: one table of named columns, printed as an aligned human table, CSV, or
// a JSON object with one array per column (plus extra top-level fields such as "atom"); and the
// objects of the `models` and `jobs` commands, one at a time or as a list.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace posbias::cli {

enum class Format { kTable, kJson, kCsv };

struct Column {
  std::string name;
  std::vector<double> values;
  bool integer = false;  // Printed without a fraction (positions).
};

struct Table {
  std::vector<Column> columns;
  // Scalars printed after the table (human), as top-level keys (JSON), as '#' comments (CSV).
  nlohmann::ordered_json extras = nlohmann::ordered_json::object();
};

// Parses "table", "json" or "csv".
bool ParseFormat(const std::string& text, Format* format);

void PrintResult(const Table& table, Format format, std::ostream& out);

// One object (a model, a job): indented JSON, else one "key: value" line per field.
void PrintObject(const nlohmann::ordered_json& object, Format format, std::ostream& out);

// A list of objects: a JSON array, else a header line of `columns` and one line per object, the
// fields separated by two spaces (table) or a comma (csv). Strings are printed without quotes.
void PrintList(const nlohmann::ordered_json& items, const std::vector<std::string>& columns,
               Format format, std::ostream& out);

// An enum value's name without `prefix`, in lower case: "JOB_STATE_QUEUED" -> "queued".
std::string LowerEnum(const std::string& name, const std::string& prefix);

// Shortest round-trip form of a double ("-inf", "nan" for non-finite values).
std::string FormatNumber(double value);

}  // namespace posbias::cli
