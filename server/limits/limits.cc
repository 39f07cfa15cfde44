#include "server/limits/limits.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/strip.h"

namespace posbias::limits {

static_assert(static_cast<size_t>(Limit::kMaxLabels) + 1 == std::size(kLimits), "one row per Limit, in order");

std::string EnvironmentVariable(const LimitSpec& limit) {
  if (limit.fixed()) return "";
  std::string name = absl::AsciiStrToUpper(std::string(limit.flag.substr(2)));  // Flags start with "--".
  absl::StrReplaceAll({{"-", "_"}}, &name);
  return absl::StrCat("POSBIAS_", name);
}

std::string FormatNumber(double value) {
  if (value != std::floor(value) || std::fabs(value) >= 1e18) return absl::StrCat(value);
  if (std::fabs(value) > 1e9) {  // 4e9 rather than 4,000,000,000 when it is a round power of ten.
    const int exponent = static_cast<int>(std::floor(std::log10(std::fabs(value))));
    const double mantissa = value / std::pow(10.0, exponent);
    if (mantissa == std::floor(mantissa)) return absl::StrCat(static_cast<int64_t>(mantissa), "e", exponent);
  }
  std::string digits = absl::StrCat(static_cast<int64_t>(std::fabs(value)));
  std::string grouped;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return value < 0 ? "-" + grouped : grouped;
}

namespace {

// Plain digits, as a flag takes them back (the docs group thousands; a message need not).
std::string Digits(double value) {
  const bool integral = value == std::floor(value) && std::fabs(value) < 9e18;
  return integral ? absl::StrCat(static_cast<int64_t>(value)) : absl::StrCat(value);
}

std::string WithFlag(const LimitSpec& limit, std::string text) {
  if (!limit.fixed()) absl::StrAppend(&text, " (", std::string(limit.flag), ")");
  return text;
}

}  // namespace

std::string Allowed(Limit id, double value) {
  const LimitSpec& limit = Spec(id);
  return WithFlag(limit, absl::StrCat("at most ", Digits(value), " ", std::string(limit.unit)));
}

std::string Range(Limit id, double lowest, double value) {
  const LimitSpec& limit = Spec(id);
  return WithFlag(limit, absl::StrCat(Digits(lowest), "..", Digits(value), " ", std::string(limit.unit)));
}

bool ReadShown(std::string_view text, std::string_view unit, double* value) {
  std::string number(absl::StripAsciiWhitespace(std::string(text)));
  double scale = 1;
  const bool bytes = unit == "bytes" || unit == "MiB";
  const double mib_scale = unit == "MiB" ? 1.0 / 1048576 : 1.0;
  auto strip_suffix = [&](std::string_view suffix, double factor) {
    if (number.size() < suffix.size() || number.compare(number.size() - suffix.size(), suffix.size(), suffix) != 0) {
      return false;
    }
    number = std::string(absl::StripAsciiWhitespace(number.substr(0, number.size() - suffix.size())));
    scale = factor;
    return true;
  };
  if (bytes) {
    (void)(strip_suffix(" KiB", 1024.0 * mib_scale) || strip_suffix(" MiB", 1048576.0 * mib_scale) ||
           strip_suffix(" GiB", 1073741824.0 * mib_scale) || strip_suffix(" TiB", 1099511627776.0 * mib_scale));
  } else if (unit == "seconds") {
    (void)(strip_suffix(" s", 1) || strip_suffix(" min", 60) || strip_suffix(" h", 3600) || strip_suffix(" d", 86400));
  } else if (unit == "hours") {
    (void)(strip_suffix(" h", 1) || strip_suffix(" d", 24));
  }
  absl::StrReplaceAll({{",", ""}}, &number);
  double parsed = 0;
  if (const auto caret = number.find('^'); caret != std::string::npos) {
    double base = 0, exponent = 0;
    if (!absl::SimpleAtod(number.substr(0, caret), &base) || !absl::SimpleAtod(number.substr(caret + 1), &exponent)) {
      return false;
    }
    parsed = std::pow(base, exponent);
  } else if (!absl::SimpleAtod(number, &parsed)) {
    return false;
  }
  *value = parsed * scale;
  return true;
}

}  // namespace posbias::limits
