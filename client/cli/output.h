// Output of the posbias CLI: one table of named columns, printed as an aligned human table, CSV, or
// a JSON object with one array per column (plus extra top-level fields such as "atom").
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

// Shortest round-trip form of a double ("-inf", "nan" for non-finite values).
std::string FormatNumber(double value);

}  // namespace posbias::cli
