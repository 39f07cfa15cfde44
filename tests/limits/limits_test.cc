// The limits table (server/limits/limits.h) and what is made from it: the refusal texts, and the
// docs that restate it. The two tables of docs/operations/limits.md and every proto comment that names a flag
// are read here and compared with the table, so a default changed in one place fails here.
#include "server/limits/limits.h"

#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"

namespace posbias::limits {
namespace {

std::string ReadSource(const std::string& relative) {
  std::ifstream in(std::string(POSBIAS_SOURCE_DIR) + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

const LimitSpec* ByFlag(std::string_view flag) {
  for (const auto& limit : kLimits) {
    if (!limit.fixed() && limit.flag == flag) return &limit;
  }
  return nullptr;
}

bool ReadsAs(std::string_view text, const LimitSpec& limit) {
  double value = 0;
  return ReadShown(text, limit.unit, &value) && std::fabs(value - limit.default_value) <= 1e-9 * limit.default_value;
}

// The cells of each row of the Markdown table under `heading` (header and rule rows left out).
std::vector<std::vector<std::string>> TableUnder(const std::string& readme, const std::string& heading) {
  std::vector<std::vector<std::string>> rows;
  const size_t at = readme.find(heading);
  EXPECT_NE(at, std::string::npos) << heading;
  if (at == std::string::npos) return rows;
  std::istringstream lines(readme.substr(at));
  std::string line;
  std::getline(lines, line);  // The heading.
  bool in_table = false;
  int seen = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("|", 0) != 0) {
      if (in_table) break;
      continue;
    }
    in_table = true;
    if (++seen <= 2) continue;  // Header and rule.
    std::vector<std::string> cells;
    for (absl::string_view cell : absl::StrSplit(absl::StripSuffix(absl::StripPrefix(line, "|"), "|"), '|')) {
      cells.emplace_back(absl::StripAsciiWhitespace(cell));
    }
    rows.push_back(cells);
  }
  return rows;
}

std::vector<std::string> FlagsIn(const std::string& text) {
  std::vector<std::string> flags;
  static const std::regex kFlag("--[a-z][a-z0-9-]*");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), kFlag); it != std::sregex_iterator(); ++it) {
    flags.push_back(it->str());
  }
  return flags;
}

TEST(LimitsTable, HasOneRowPerLimitInOrderWithDefaultsInTheirRangeAndAsTheDocsWriteThem) {
  std::set<std::string_view> names, flags;
  for (size_t i = 0; i < std::size(kLimits); ++i) {
    const LimitSpec& limit = kLimits[i];
    SCOPED_TRACE(std::string(limit.name));
    EXPECT_EQ(static_cast<size_t>(limit.id), i);
    EXPECT_TRUE(names.insert(limit.name).second) << "a name used twice";
    EXPECT_LE(limit.lowest, limit.default_value);
    EXPECT_LE(limit.default_value, limit.highest);
    EXPECT_TRUE(ReadsAs(limit.shown, limit)) << "'" << limit.shown << "' does not read as " << limit.default_value;
    EXPECT_FALSE(limit.unit.empty());
    EXPECT_FALSE(limit.help.empty());
    if (limit.fixed()) {
      EXPECT_EQ(limit.lowest, limit.highest) << "a fixed limit cannot be set";
      EXPECT_EQ(EnvironmentVariable(limit), "");
    } else {
      EXPECT_TRUE(flags.insert(limit.flag).second) << "a flag used twice";
      EXPECT_EQ(limit.flag.substr(0, 2), "--");
    }
  }
  EXPECT_EQ(EnvironmentVariable(Spec(Limit::kMaxDiscreteLength)), "POSBIAS_MAX_DISCRETE_LENGTH");
}

TEST(LimitsTable, AllowedTextNamesTheValueTheUnitAndTheFlagToChange) {
  EXPECT_EQ(Allowed(Limit::kMaxPoints), "at most 1000000 points (--max-points)");
  EXPECT_EQ(Allowed(Limit::kMaxPoints, 50), "at most 50 points (--max-points)") << "the configured value";
  EXPECT_EQ(Allowed(Limit::kMaxDiscreteWork), "at most 4000000000 layer-positions (H*L) (--max-discrete-work)");
  EXPECT_EQ(Allowed(Limit::kMaxSamples), "at most 65536 samples") << "a fixed limit names no flag";
  EXPECT_EQ(Range(Limit::kMaxSequenceLength, 1, 131072), "1..131072 positions (--max-sequence-length)");
  EXPECT_EQ(Range(Limit::kMaxJobTimeLimit, 1, 86400), "1..86400 seconds (--max-job-time-limit)");
}

TEST(LimitsTable, NumbersAreWrittenWithThousandsSeparatorsOrAsPowersOfTen) {
  EXPECT_EQ(FormatNumber(0), "0");
  EXPECT_EQ(FormatNumber(999), "999");
  EXPECT_EQ(FormatNumber(1000), "1,000");
  EXPECT_EQ(FormatNumber(134217728), "134,217,728");
  EXPECT_EQ(FormatNumber(4e9), "4e9");
  EXPECT_EQ(FormatNumber(4294967296.0), "4,294,967,296");
  EXPECT_EQ(FormatNumber(0.5), "0.5");
  double value = 0;
  EXPECT_TRUE(ReadShown("2^27", "values", &value));
  EXPECT_EQ(value, 134217728);
  EXPECT_TRUE(ReadShown("16 GiB", "bytes", &value));
  EXPECT_EQ(value, 17179869184.0);
  EXPECT_TRUE(ReadShown("8 GiB", "MiB", &value));
  EXPECT_EQ(value, 8192);
  EXPECT_TRUE(ReadShown("24 h", "seconds", &value));
  EXPECT_EQ(value, 86400);
  EXPECT_FALSE(ReadShown("a lot", "values", &value));
}

TEST(LimitsDocs, TheFlagTableGivesEveryConfigurableLimitItsVariableAndDefault) {
  const std::string readme = ReadSource("docs/operations/limits.md");
  std::set<std::string_view> documented;
  for (const auto& row : TableUnder(readme, "## Server flags (environment variables")) {
    ASSERT_GE(row.size(), 2u);
    const auto flags = FlagsIn(row[0]);
    ASSERT_FALSE(flags.empty()) << row[0];
    const LimitSpec* limit = ByFlag(flags.front());
    if (limit == nullptr) continue;  // A flag that is not a limit (--listen, --log-level, ...).
    SCOPED_TRACE(flags.front());
    documented.insert(limit->flag);
    EXPECT_NE(row[0].find("`" + EnvironmentVariable(*limit) + "`"), std::string::npos) << row[0];
    EXPECT_TRUE(ReadsAs(row[1], *limit)) << "docs default '" << row[1] << "', the table's " << limit->shown;
  }
  for (const auto& limit : kLimits) {
    if (!limit.fixed()) {
      EXPECT_TRUE(documented.count(limit.flag)) << limit.flag << " has no row in the flag table";
    }
  }
}

TEST(LimitsDocs, TheGuaranteesTableStatesEachLimitsDefaultStatusAndReason) {
  const std::string readme = ReadSource("docs/operations/limits.md");
  std::set<std::string_view> documented;
  for (const auto& row : TableUnder(readme, "## Limits and guarantees")) {
    ASSERT_EQ(row.size(), 4u) << row[0];
    for (const std::string& flag : FlagsIn(row[2])) {
      const LimitSpec* limit = ByFlag(flag);
      if (limit == nullptr) continue;  // --auth-tokens-file and other flags that are not limits.
      SCOPED_TRACE(flag);
      documented.insert(limit->flag);
      EXPECT_NE(row[1].find(std::string(limit->shown)), std::string::npos)
          << "the default cell '" << row[1] << "' lacks " << limit->shown;
      const std::string code = absl::StatusCodeToString(limit->code);
      EXPECT_NE(row[3].find(code), std::string::npos) << "'" << row[3] << "' lacks " << code;
      if (limit->reason != ErrorReason::kInternalError && limit->reason != ErrorReason::kInvalidArgument) {
        EXPECT_NE(row[3].find(std::string(ErrorReasonName(limit->reason))), std::string::npos)
            << "'" << row[3] << "' lacks " << ErrorReasonName(limit->reason);
      }
    }
  }
  for (const auto& limit : kLimits) {
    if (limit.fixed() || limit.reason == ErrorReason::kJobNotFound) continue;  // Retention is no refusal.
    EXPECT_TRUE(documented.count(limit.flag)) << limit.flag << " has no row in the guarantees table";
  }
}

// Flags a proto comment may name that are not limits: what the operator turns on, and the CLI's.
const std::set<std::string> kOtherFlags = {"--allow-torchscript", "--model-root", "--format", "--force"};

TEST(LimitsDocs, ProtoCommentsNameOnlyRealFlagsAndStateTheirDefaultsAsTheTableDoes) {
  int checked = 0;
  for (const char* file : {"proto/posbias/v1/common.proto", "proto/posbias/v1/density_service.proto",
                           "proto/posbias/v1/job_service.proto", "proto/posbias/v1/model_service.proto"}) {
    // Each comment block as one line, so a "(--flag, default N)" broken across lines still reads.
    std::string comments;
    std::istringstream lines(ReadSource(file));
    std::string line;
    while (std::getline(lines, line)) {
      const size_t slashes = line.find("//");
      comments += slashes == std::string::npos ? "\n" : " " + line.substr(slashes + 2);
    }
    for (const std::string& flag : FlagsIn(comments)) {
      EXPECT_TRUE(ByFlag(flag) != nullptr || kOtherFlags.count(flag)) << file << " names " << flag << ", no such flag";
    }
    static const std::regex kStated("(--[a-z][a-z0-9-]*), +default +([^);]+)[);]");
    for (auto it = std::sregex_iterator(comments.begin(), comments.end(), kStated); it != std::sregex_iterator(); ++it) {
      const LimitSpec* limit = ByFlag((*it)[1].str());
      ASSERT_NE(limit, nullptr) << (*it)[0];
      std::string value = (*it)[2].str();
      value = std::regex_replace(value, std::regex(" +"), " ");
      value = std::regex_replace(value, std::regex(", [^0-9].*$"), "");  // "64 MiB, about 15 million ids".
      EXPECT_TRUE(ReadsAs(std::string(absl::StripAsciiWhitespace(value)), *limit))
          << file << ": '" << (*it)[0] << "', the table's default is " << limit->shown;
      ++checked;
    }
    // A limit stated without its flag leaves the reader nothing to look up.
    static const std::regex kNameless("[^-]limit,? *\\(?default");
    EXPECT_FALSE(std::regex_search(comments, kNameless)) << file << " states a limit's default without its flag";
  }
  EXPECT_GE(checked, 8) << "the proto comments state the configurable limits' defaults";
}

}  // namespace
}  // namespace posbias::limits
