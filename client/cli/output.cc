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

void PrintHuman(const Table& table, std::ostream& out) {
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
  for (const auto& [key, value] : table.extras.items()) out << key << ": " << value.dump() << "\n";
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

std::string Text(const nlohmann::ordered_json& value) {
  return value.is_string() ? value.get<std::string>() : value.dump();
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
  for (const auto& [key, value] : object.items()) out << key << ": " << Text(value) << "\n";
}

void PrintList(const nlohmann::ordered_json& items, const std::vector<std::string>& columns,
               Format format, std::ostream& out) {
  if (format == Format::kJson) {
    out << items.dump(2) << "\n";
    return;
  }
  const std::string separator = format == Format::kCsv ? "," : "  ";
  for (size_t c = 0; c < columns.size(); ++c) out << (c ? separator : "") << columns[c];
  out << "\n";
  for (const auto& item : items) {
    for (size_t c = 0; c < columns.size(); ++c) {
      out << (c ? separator : "") << Text(item[columns[c]]);
    }
    out << "\n";
  }
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
