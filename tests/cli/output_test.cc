#include "client/cli/output.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <iterator>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

constexpr double kNan = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string Print(const Table& table, Format format) {
  std::ostringstream out;
  PrintResult(table, format, out);
  return out.str();
}

// A position column (integer) next to a value column, as most commands print.
Table PositionsAndValues() {
  Table table;
  table.columns.push_back({"position", {1, 2, 3}, /*integer=*/true});
  table.columns.push_back({"value", {0.5, -0.25, 10}, /*integer=*/false});
  return table;
}

nlohmann::ordered_json PrintJson(const Table& table) {
  const std::string text = Print(table, Format::kJson);
  return nlohmann::ordered_json::parse(text);  // Throws (fails the test) on invalid JSON.
}

// ---------------------------------------------------------------- ParseFormat

TEST(ParseFormat, AcceptsTableJsonAndCsv) {
  Format format = Format::kTable;
  ASSERT_TRUE(ParseFormat("json", &format));
  EXPECT_EQ(format, Format::kJson);
  ASSERT_TRUE(ParseFormat("csv", &format));
  EXPECT_EQ(format, Format::kCsv);
  ASSERT_TRUE(ParseFormat("table", &format));
  EXPECT_EQ(format, Format::kTable);
}

TEST(ParseFormat, RejectsOtherNamesAndLeavesTheFormatUnchanged) {
  for (const char* text : {"", "JSON", "Csv", " table", "tsv", "text", "jsonl"}) {
    Format format = Format::kCsv;
    EXPECT_FALSE(ParseFormat(text, &format)) << '"' << text << '"';
    EXPECT_EQ(format, Format::kCsv) << '"' << text << '"';
  }
}

// ---------------------------------------------------------------- FormatNumber

TEST(FormatNumber, PrintsTheShortestFormThatRoundTrips) {
  EXPECT_EQ(FormatNumber(0), "0");
  EXPECT_EQ(FormatNumber(1), "1");
  EXPECT_EQ(FormatNumber(0.1), "0.1");
  EXPECT_EQ(FormatNumber(-2.5), "-2.5");
  EXPECT_EQ(FormatNumber(1e300), "1e+300");
  EXPECT_EQ(FormatNumber(1.0 / 3), "0.3333333333333333");
}

TEST(FormatNumber, ReadsBackAsTheSameDouble) {
  for (double value : {1.0 / 3, 0.1 + 0.2, -1e-300, 6.02214076e23, 123456789.125,
                       std::numeric_limits<double>::max(), std::numeric_limits<double>::min(),
                       std::numeric_limits<double>::denorm_min(),
                       std::numeric_limits<double>::lowest()}) {
    const std::string text = FormatNumber(value);
    EXPECT_EQ(std::strtod(text.c_str(), nullptr), value) << text;
  }
}

TEST(FormatNumber, NamesNonFiniteValuesNanInfAndMinusInf) {
  EXPECT_EQ(FormatNumber(kNan), "nan");
  EXPECT_EQ(FormatNumber(-kNan), "nan");
  EXPECT_EQ(FormatNumber(kInf), "inf");
  EXPECT_EQ(FormatNumber(-kInf), "-inf");
}

// ---------------------------------------------------------------- human table

TEST(PrintResultAsTable, RightAlignsEveryColumnToAtLeastTwelveCharacters) {
  EXPECT_EQ(Print(PositionsAndValues(), Format::kTable),
            "    position         value\n"
            "           1           0.5\n"
            "           2         -0.25\n"
            "           3            10\n");
}

TEST(PrintResultAsTable, WidensAColumnToItsLongName) {
  Table table;
  table.columns.push_back({"a_rather_long_name", {1.5}, false});
  table.columns.push_back({"x", {2}, false});
  EXPECT_EQ(Print(table, Format::kTable),
            "a_rather_long_name             x\n"
            "               1.5             2\n");
}

TEST(PrintResultAsTable, WidensAColumnToItsWidestValueSoNothingOverflowsItsHeader) {
  Table table;
  table.columns.push_back({"value", {1, -1.2345678901234567e-300}, /*integer=*/false});
  table.columns.push_back({"next", {2, 3}, /*integer=*/true});
  const std::string text = Print(table, Format::kTable);
  std::istringstream lines(text);
  std::string header, first, second;
  std::getline(lines, header);
  std::getline(lines, first);
  std::getline(lines, second);
  EXPECT_EQ(header.size(), second.size()) << text;
  EXPECT_EQ(first.size(), second.size()) << text;
  // The second column starts at the same place in every line.
  EXPECT_EQ(header.find("next") + 4, header.size());
  EXPECT_EQ(second.rfind(" 3") + 2, second.size());
  EXPECT_EQ(second.find(FormatNumber(-1.2345678901234567e-300) + "  "), 0u) << text;
}

TEST(PrintResultAsTable, PrintsIntegerColumnsWithoutAFraction) {
  Table table;
  table.columns.push_back({"position", {1, 250, 100000}, true});
  const std::string text = Print(table, Format::kTable);
  EXPECT_NE(text.find("           1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("         250\n"), std::string::npos) << text;
  EXPECT_NE(text.find("      100000\n"), std::string::npos) << text;
  EXPECT_EQ(text.find('.'), std::string::npos) << text;
  EXPECT_EQ(text.find('e'), std::string::npos) << text;
}

TEST(PrintResultAsTable, PrintsNonFiniteValuesAsNanAndInfEvenInIntegerColumns) {
  Table table;
  table.columns.push_back({"position", {kNan, kInf}, true});
  table.columns.push_back({"value", {-kInf, kNan}, false});
  EXPECT_EQ(Print(table, Format::kTable),
            "    position         value\n"
            "         nan          -inf\n"
            "         inf           nan\n");
}

TEST(PrintResultAsTable, LeavesTheCellsOfAShorterColumnBlank) {
  Table table;
  table.columns.push_back({"long", {1, 2}, true});
  table.columns.push_back({"short", {7}, true});
  EXPECT_EQ(Print(table, Format::kTable),
            "        long         short\n"
            "           1             7\n"
            "           2              \n");
}

// The answer where the eye lands (found by a first session: a fit's answer came after 256 rows,
// as one line of JSON): the extras first, a string without quotes, an object's members a line
// each, a list of objects an element a line; then the rows.
TEST(PrintResultAsTable, PrintsTheExtrasFirstAsLinesOfNamesAndValues) {
  Table table = PositionsAndValues();
  table.extras["atom"] = 0.5;
  table.extras["service"] = "checkout";
  table.extras["summary"] = {{"peak", 3}, {"metrics", {{"rmse", 0.25}}}};
  table.extras["fits"] = nlohmann::ordered_json::array({{{"model", "coherent"}, {"depth", 2}}});
  table.extras["unknown"] = nullptr;
  const std::string text = Print(table, Format::kTable);
  EXPECT_EQ(text.substr(0, text.find("    position")),
            "atom: 0.5\n"
            "service: checkout\n"
            "summary:\n"
            "  peak: 3\n"
            "  metrics: rmse 0.25\n"
            "fits:\n"
            "  - model coherent, depth 2\n"
            "unknown: -\n");
  EXPECT_NE(text.find("           3            10\n"), std::string::npos) << text;
}

TEST(PrintResultAsTable, PrintsNothingForAnEmptyTable) {
  EXPECT_EQ(Print(Table{}, Format::kTable), "") << "no blank first line";
}

// ---------------------------------------------------------------- CSV

TEST(PrintResultAsCsv, PrintsAHeaderAndOneCommaSeparatedLinePerRow) {
  EXPECT_EQ(Print(PositionsAndValues(), Format::kCsv),
            "position,value\n"
            "1,0.5\n"
            "2,-0.25\n"
            "3,10\n");
}

TEST(PrintResultAsCsv, PrintsExtrasAsHashCommentsBeforeTheHeader) {
  Table table = PositionsAndValues();
  table.extras["atom"] = 0.125;
  table.extras["status"] = "ok";
  const std::string text = Print(table, Format::kCsv);
  EXPECT_EQ(text.substr(0, text.find("position,value")),
            "# atom = 0.125\n"
            "# status = \"ok\"\n");
}

TEST(PrintResultAsCsv, KeepsFullPrecisionAndPrintsIntegersWithoutAFraction) {
  Table table;
  table.columns.push_back({"position", {42}, true});
  table.columns.push_back({"value", {1.0 / 3}, false});
  EXPECT_EQ(Print(table, Format::kCsv), "position,value\n42,0.3333333333333333\n");
}

TEST(PrintResultAsCsv, PrintsNonFiniteValuesAsNanAndInf) {
  Table table;
  table.columns.push_back({"value", {kNan, kInf, -kInf}, false});
  EXPECT_EQ(Print(table, Format::kCsv), "value\nnan\ninf\n-inf\n");
}

TEST(PrintResultAsCsv, LeavesTheCellsOfAShorterColumnEmpty) {
  Table table;
  table.columns.push_back({"a", {1, 2}, true});
  table.columns.push_back({"b", {3}, true});
  EXPECT_EQ(Print(table, Format::kCsv), "a,b\n1,3\n2,\n");
}

// ---------------------------------------------------------------- JSON

TEST(PrintResultAsJson, WritesOneArrayPerColumnInColumnOrder) {
  const auto json = PrintJson(PositionsAndValues());
  ASSERT_TRUE(json.is_object());
  ASSERT_EQ(json.size(), 2u);
  EXPECT_EQ(json.begin().key(), "position");
  EXPECT_EQ(std::next(json.begin()).key(), "value");
  EXPECT_EQ(json["position"], nlohmann::ordered_json::parse("[1, 2, 3]"));
  EXPECT_EQ(json["value"].get<std::vector<double>>(), (std::vector<double>{0.5, -0.25, 10}));
}

TEST(PrintResultAsJson, IndentsByTwoSpacesAndEndsWithANewline) {
  Table table;
  table.columns.push_back({"p", {1}, true});
  EXPECT_EQ(Print(table, Format::kJson), "{\n  \"p\": [\n    1\n  ]\n}\n");
}

TEST(PrintResultAsJson, WritesIntegerColumnsAsJsonIntegers) {
  Table table;
  table.columns.push_back({"position", {1, 2, 100000}, true});
  const std::string text = Print(table, Format::kJson);
  EXPECT_EQ(text.find('.'), std::string::npos) << text;
  const auto json = nlohmann::ordered_json::parse(text);
  for (const auto& item : json["position"]) EXPECT_TRUE(item.is_number_integer()) << item;
  EXPECT_EQ(json["position"].back(), 100000);
}

TEST(PrintResultAsJson, WritesNonFiniteNumbersAsNull) {
  Table table;
  table.columns.push_back({"value", {1.5, kNan, kInf, -kInf}, false});
  const std::string text = Print(table, Format::kJson);
  EXPECT_EQ(text.find("nan"), std::string::npos) << text;
  EXPECT_EQ(text.find("inf"), std::string::npos) << text;
  const auto json = nlohmann::ordered_json::parse(text);
  ASSERT_EQ(json["value"].size(), 4u);
  EXPECT_EQ(json["value"][0], 1.5);
  EXPECT_TRUE(json["value"][1].is_null());
  EXPECT_TRUE(json["value"][2].is_null());
  EXPECT_TRUE(json["value"][3].is_null());
}

TEST(PrintResultAsJson, KeepsEveryDoubleExactly) {
  const std::vector<double> values = {1.0 / 3, 0.1, 1e-300, 6.02214076e23, -123456789.125};
  Table table;
  table.columns.push_back({"value", values, false});
  EXPECT_EQ(PrintJson(table)["value"].get<std::vector<double>>(), values);
}

TEST(PrintResultAsJson, AddsExtrasAsTopLevelKeysAfterTheColumns) {
  Table table = PositionsAndValues();
  table.extras["atom"] = 0.5;
  table.extras["fits"] = nlohmann::ordered_json::array();
  table.extras["fits"].push_back({{"name", "power"}, {"exponent", -1.5}});
  const auto json = PrintJson(table);
  std::vector<std::string> keys;
  for (auto it = json.begin(); it != json.end(); ++it) keys.push_back(it.key());
  EXPECT_EQ(keys, (std::vector<std::string>{"position", "value", "atom", "fits"}));
  EXPECT_EQ(json["atom"], 0.5);
  EXPECT_EQ(json["fits"][0]["name"], "power");
  EXPECT_EQ(json["fits"][0]["exponent"], -1.5);
}

TEST(PrintResultAsJson, WritesNonFiniteExtrasAsNull) {
  Table table;
  table.extras["floor"] = -kInf;
  const auto json = PrintJson(table);
  ASSERT_TRUE(json.contains("floor"));
  EXPECT_TRUE(json["floor"].is_null());
}

TEST(PrintResultAsJson, WritesAnEmptyObjectForAnEmptyTable) {
  EXPECT_EQ(Print(Table{}, Format::kJson), "{}\n");
}

TEST(PrintResultAsJson, WritesAnEmptyArrayForAnEmptyColumn) {
  Table table;
  table.columns.push_back({"value", {}, false});
  const auto json = PrintJson(table);
  ASSERT_TRUE(json["value"].is_array());
  EXPECT_TRUE(json["value"].empty());
}

// BUG: PrintJson casts integer-column values to long long without checking finiteness, so NaN/inf
// (undefined behaviour; in practice LLONG_MIN) end up in the JSON where the table and CSV print
// nan/inf and non-integer columns print null. Enable once fixed.
TEST(PrintResultAsJson, WritesNonFiniteValuesOfIntegerColumnsAsNull) {
  Table table;
  table.columns.push_back({"position", {1, kNan, kInf}, true});
  const auto json = PrintJson(table);
  ASSERT_EQ(json["position"].size(), 3u);
  EXPECT_EQ(json["position"][0], 1);
  EXPECT_TRUE(json["position"][1].is_null()) << json["position"][1];
  EXPECT_TRUE(json["position"][2].is_null()) << json["position"][2];
}

// ---------------------------------------------------------------- PrintObject, PrintList

nlohmann::ordered_json Model() {
  return {{"name", "tiny"}, {"layers", 2}, {"builtin", false}, {"error", nullptr}};
}

std::string PrintObjectText(const nlohmann::ordered_json& object, Format format) {
  std::ostringstream out;
  PrintObject(object, format, out);
  return out.str();
}

std::string PrintListText(const nlohmann::ordered_json& items, Format format) {
  std::ostringstream out;
  PrintList(items, {"name", "layers"}, format, out);
  return out.str();
}

TEST(PrintObject, PrintsOneKeyValueLinePerFieldWithStringsUnquoted) {
  // Nothing known reads "-" (found by a first session: "parameters 0", "seed: 0").
  const std::string expected = "name: tiny\nlayers: 2\nbuiltin: false\nerror: -\n";
  EXPECT_EQ(PrintObjectText(Model(), Format::kTable), expected);
  EXPECT_EQ(PrintObjectText(Model(), Format::kCsv), expected);
}

TEST(PrintObject, PrintsIndentedJsonInFieldOrder) {
  EXPECT_EQ(PrintObjectText(Model(), Format::kJson), Model().dump(2) + "\n");
}

TEST(PrintList, PrintsAHeaderAndOneLinePerItemOfTheChosenFields) {
  const nlohmann::ordered_json items = {Model(), {{"name", "big"}, {"layers", 24}}};
  EXPECT_EQ(PrintListText(items, Format::kTable), "name  layers\ntiny  2\nbig   24\n") << "columns aligned";
  EXPECT_EQ(PrintListText(items, Format::kCsv), "name,layers\ntiny,2\nbig,24\n");
  EXPECT_EQ(PrintListText(items, Format::kJson), items.dump(2) + "\n");
}

TEST(PrintList, PrintsOnlyTheHeaderOrAnEmptyArrayForNoItems) {
  const auto none = nlohmann::ordered_json::array();
  EXPECT_EQ(PrintListText(none, Format::kTable), "name  layers\n");
  EXPECT_EQ(PrintListText(none, Format::kJson), "[]\n");
}

TEST(LowerEnum, DropsThePrefixAndLowersTheRest) {
  EXPECT_EQ(LowerEnum("JOB_STATE_QUEUED", "JOB_STATE_"), "queued");
  EXPECT_EQ(LowerEnum("MODEL_FAMILY_GPT2", "MODEL_FAMILY_"), "gpt2");
  EXPECT_EQ(LowerEnum("OTHER_NAME", "JOB_STATE_"), "other_name");
}

}  // namespace
}  // namespace posbias::cli
