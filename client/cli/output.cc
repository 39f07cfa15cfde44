#include "client/cli/output.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "absl/strings/ascii.h"

namespace posbias::cli {
namespace {

std::string Cell(const Column& column, size_t row) {
  if (row >= column.values.size()) return "";
  const double value = column.values[row];
  if (column.integer && std::isfinite(value)) return std::to_string(static_cast<long long>(value));
  return FormatNumber(value);
}

size_t RowCount(const Table& table) {
  size_t rows = 0;
  for (const auto& column : table.columns) rows = std::max(rows, column.values.size());
  return rows;
}

// A cell or value: a string without quotes, nothing known as "-", anything else as JSON.
std::string Text(const nlohmann::ordered_json& value) {
  if (value.is_null()) return "-";
  return value.is_string() ? value.get<std::string>() : value.dump();
}

// One value as a person reads it: a string without quotes, an object as "key value" pairs, an
// array of numbers comma-separated (nested objects flattened with dots: "metrics.rmse_log 0.1").
std::string Inline(const nlohmann::ordered_json& value, const std::string& prefix = "") {
  if (value.is_object()) {
    std::string text;
    for (const auto& [key, item] : value.items()) {
      const std::string name = prefix.empty() ? key : prefix + "." + key;
      text += (text.empty() ? "" : ", ") + (item.is_object() ? Inline(item, name) : name + " " + Inline(item));
    }
    return text;
  }
  if (value.is_array() && std::none_of(value.begin(), value.end(), [](const auto& v) { return v.is_structured(); })) {
    std::string text;
    for (const auto& item : value) text += (text.empty() ? "" : ", ") + Text(item);
    return text;
  }
  return Text(value);
}

// The extras below a table: "key: value"; an object's members on lines of their own, indented; an
// array of objects one element a line.
void PrintExtras(const nlohmann::ordered_json& extras, std::ostream& out) {
  for (const auto& [key, value] : extras.items()) {
    if (value.is_object()) {
      out << key << ":\n";
      for (const auto& [member, item] : value.items()) out << "  " << member << ": " << Inline(item) << "\n";
    } else if (value.is_array() && std::any_of(value.begin(), value.end(), [](const auto& v) { return v.is_structured(); })) {
      out << key << ":\n";
      for (const auto& item : value) out << "  - " << Inline(item) << "\n";
    } else {
      out << key << ": " << Inline(value) << "\n";
    }
  }
}

void PrintHuman(const Table& table, std::ostream& out) {
  // The answer first (a fit's alpha, a summary's masses, a health status), then the rows it was
  // made from; a table of nothing but extras prints no empty header line.
  PrintExtras(table.extras, out);
  if (table.columns.empty()) return;
  // Each column as wide as its widest cell or its header (at least 12), so values never overflow.
  std::vector<size_t> width;
  const size_t rows = RowCount(table);
  for (const auto& column : table.columns) {
    size_t widest = std::max<size_t>(column.name.size(), 12);
    for (size_t row = 0; row < rows; ++row) widest = std::max(widest, Cell(column, row).size());
    width.push_back(widest);
  }
  for (size_t c = 0; c < table.columns.size(); ++c) {
    out << (c ? "  " : "") << std::string(width[c] - table.columns[c].name.size(), ' ')
        << table.columns[c].name;
  }
  out << "\n";
  for (size_t row = 0; row < rows; ++row) {
    for (size_t c = 0; c < table.columns.size(); ++c) {
      const std::string cell = Cell(table.columns[c], row);
      out << (c ? "  " : "") << std::string(width[c] > cell.size() ? width[c] - cell.size() : 0, ' ')
          << cell;
    }
    out << "\n";
  }
}

void PrintCsv(const Table& table, std::ostream& out) {
  for (const auto& [key, value] : table.extras.items()) out << "# " << key << " = " << value.dump() << "\n";
  for (size_t c = 0; c < table.columns.size(); ++c) out << (c ? "," : "") << table.columns[c].name;
  out << "\n";
  for (size_t row = 0; row < RowCount(table); ++row) {
    for (size_t c = 0; c < table.columns.size(); ++c) out << (c ? "," : "") << Cell(table.columns[c], row);
    out << "\n";
  }
}

void PrintJson(const Table& table, std::ostream& out) {
  nlohmann::ordered_json json = nlohmann::ordered_json::object();
  for (const auto& column : table.columns) {
    auto& array = json[column.name] = nlohmann::ordered_json::array();
    for (double value : column.values) {
      if (column.integer && std::isfinite(value)) {
        array.push_back(static_cast<long long>(value));
      } else {
        array.push_back(value);  // Non-finite values become null.
      }
    }
  }
  for (const auto& [key, value] : table.extras.items()) json[key] = value;
  out << json.dump(2) << "\n";
}

}  // namespace

bool ParseFormat(const std::string& text, Format* format) {
  if (text == "table") *format = Format::kTable;
  else if (text == "json") *format = Format::kJson;
  else if (text == "csv") *format = Format::kCsv;
  else return false;
  return true;
}

void PrintResult(const Table& table, Format format, std::ostream& out) {
  switch (format) {
    case Format::kTable: PrintHuman(table, out); break;
    case Format::kCsv: PrintCsv(table, out); break;
    case Format::kJson: PrintJson(table, out); break;
  }
}

void PrintObject(const nlohmann::ordered_json& object, Format format, std::ostream& out) {
  if (format == Format::kJson) {
    out << object.dump(2) << "\n";
    return;
  }
  PrintExtras(object, out);
}

void PrintList(const nlohmann::ordered_json& items, const std::vector<std::string>& columns,
               Format format, std::ostream& out) {
  if (format == Format::kJson) {
    out << items.dump(2) << "\n";
    return;
  }
  if (format == Format::kCsv) {
    for (size_t c = 0; c < columns.size(); ++c) out << (c ? "," : "") << columns[c];
    out << "\n";
    for (const auto& item : items) {
      for (size_t c = 0; c < columns.size(); ++c) out << (c ? "," : "") << Text(item[columns[c]]);
      out << "\n";
    }
    return;
  }
  // A table: each column as wide as its widest cell, left-aligned.
  std::vector<size_t> width;
  for (const auto& column : columns) width.push_back(column.size());
  for (const auto& item : items) {
    for (size_t c = 0; c < columns.size(); ++c) width[c] = std::max(width[c], Text(item[columns[c]]).size());
  }
  auto row = [&](auto cell) {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c) {
      const std::string text = cell(c);
      line += (c ? "  " : "") + text + (c + 1 < columns.size() ? std::string(width[c] - text.size(), ' ') : "");
    }
    out << line << "\n";
  };
  row([&](size_t c) { return columns[c]; });
  for (const auto& item : items) row([&](size_t c) { return Text(item[columns[c]]); });
}

std::string LowerEnum(const std::string& name, const std::string& prefix) {
  return absl::AsciiStrToLower(name.rfind(prefix, 0) == 0 ? name.substr(prefix.size()) : name);
}

std::string FormatNumber(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  char buffer[32];
  auto [end, ec] = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return ec == std::errc() ? std::string(buffer, end) : "?";
}

}  // namespace posbias::cli
