#include "client/cli/profile_input.h"

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

absl::StatusOr<std::vector<double>> NumbersFromJson(const nlohmann::json& array,
                                                    const std::string& source) {
  std::vector<double> values;
  for (const auto& item : array) {
    if (!item.is_number()) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": expected numbers, found ", item.dump()));
    }
    values.push_back(item.get<double>());
  }
  return values;
}

absl::StatusOr<std::vector<double>> ParseJson(const std::string& text, const std::string& column,
                                              const std::string& source) {
  const nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(source, ": invalid JSON"));
  if (json.is_array()) return NumbersFromJson(json, source);
  for (const std::string& key : {column, std::string("values"), std::string("profile"),
                                 std::string("sq_norm_mean")}) {
    if (!key.empty() && json.is_object() && json.contains(key) && json[key].is_array()) {
      return NumbersFromJson(json[key], source);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      source, ": expected a JSON array or an object with \"values\", \"profile\" or \"sq_norm_mean\""));
}

// Cells of a line: split at commas, semicolons or tabs when there are any (empty cells kept, so
// columns never shift), otherwise at runs of spaces.
std::vector<std::string> SplitCells(const std::string& line) {
  const bool delimited = line.find_first_of(",;\t") != std::string::npos;
  std::vector<std::string> cells;
  std::string cell;
  auto flush = [&](bool keep_empty) {
    const auto first = cell.find_first_not_of(' ');
    cell = first == std::string::npos ? "" : cell.substr(first, cell.find_last_not_of(' ') - first + 1);
    if (!cell.empty() || keep_empty) cells.push_back(cell);
    cell.clear();
  };
  for (char c : line) {
    if (c == '\r') continue;
    if (delimited ? (c == ',' || c == ';' || c == '\t') : c == ' ') {
      flush(delimited);
    } else {
      cell += c;
    }
  }
  flush(delimited && !cells.empty());
  return cells;
}

bool ParseDouble(const std::string& text, double* value) {
  char* end = nullptr;
  *value = std::strtod(text.c_str(), &end);
  return end != text.c_str() && *end == '\0';
}

// Index of `column` among the header cells or as a 1-based number; -2 = no such column. With no
// column given: the header's "values", "profile" or "sq_norm_mean" (the keys JSON input is read
// by, the last one what `jobs result --format csv` writes beside its standard error), else -1 =
// the last column.
long ColumnIndex(const std::vector<std::string>& header, const std::string& column) {
  if (column.empty()) {
    for (const char* known : {"values", "profile", "sq_norm_mean"}) {
      for (size_t i = 0; i < header.size(); ++i) {
        if (header[i] == known) return static_cast<long>(i);
      }
    }
    return -1;
  }
  for (size_t i = 0; i < header.size(); ++i) {
    if (header[i] == column) return static_cast<long>(i);
  }
  double number = 0;
  return ParseDouble(column, &number) && number >= 1 ? static_cast<long>(number) - 1 : -2;
}

absl::StatusOr<std::vector<double>> ParseText(const std::string& text, const std::string& column,
                                              const std::string& source) {
  std::istringstream in(text);
  std::vector<double> values;
  std::vector<std::string> header;
  long index = column.empty() ? -1 : ColumnIndex({}, column);
  int line_number = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_number;
    const auto cells = SplitCells(line);
    if (cells.empty() || cells[0][0] == '#') continue;
    double value = 0;
    if (values.empty() && header.empty() && !ParseDouble(cells.back(), &value)) {
      header = cells;
      index = ColumnIndex(header, column);
      if (index == -2) return absl::InvalidArgumentError(absl::StrCat(source, ": no column ", column));
      continue;
    }
    if (index == -2) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": no column ", column, " (the input has no header line)"));
    }
    const size_t at = index < 0 ? cells.size() - 1 : static_cast<size_t>(index);
    if (at >= cells.size() || !ParseDouble(cells[at], &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(source, ":", line_number, ": expected a number in column ", at + 1));
    }
    values.push_back(value);
  }
  return values;
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseProfile(const std::string& raw, const std::string& column,
                                                 const std::string& source) {
  const std::string text = raw.rfind("\xEF\xBB\xBF", 0) == 0 ? raw.substr(3) : raw;  // UTF-8 BOM.
  const auto first = text.find_first_not_of(" \t\r\n");
  absl::StatusOr<std::vector<double>> values =
      first != std::string::npos && (text[first] == '[' || text[first] == '{')
          ? ParseJson(text, column, source)
          : ParseText(text, column, source);
  if (values.ok() && values->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": no values"));
  }
  return values;
}

absl::StatusOr<std::vector<double>> ReadProfile(const std::string& path, const std::string& column) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), {});
  } else {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  return ParseProfile(text, column, path == "-" ? "stdin" : path);
}

}  // namespace posbias::cli
