#include "server/naming/client_names.h"

#include <algorithm>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::naming {
namespace {

bool IsLower(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }
bool IsAlnum(char c) { return IsLower(c) || (c >= 'A' && c <= 'Z'); }
bool AllOf(std::string_view text, std::string_view extra, bool (*base)(char)) {
  return std::all_of(text.begin(), text.end(), [&](char c) { return base(c) || extra.find(c) != std::string_view::npos; });
}

// What a value looks like in a message: itself, cut at 64 characters.
std::string Shown(const std::string& text) { return text.size() > 64 ? text.substr(0, 64) + "..." : text; }

absl::Status CheckKey(const std::string& key, const std::string& field) {
  if (key.empty() || key.size() > 63 || !IsLower(key[0]) || !AllOf(key, "._/-", IsLower)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, field, key.empty() ? "\"\"" : Shown(key),
                                 "a key of 1 to 63 characters matching [a-z0-9][a-z0-9._/-]*"});
  }
  return absl::OkStatus();
}

absl::Status CheckValue(const std::string& value, const std::string& field) {
  if (value.size() > 63 || !AllOf(value, "._:/-", IsAlnum)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, field, Shown(value),
                                 "a value of 0 to 63 characters matching [A-Za-z0-9._:/-]*"});
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status CheckLabels(const std::map<std::string, std::string>& labels) {
  if (labels.size() > kMaxLabels) {
    return InvalidArgumentError(
        {ErrorReason::kInvalidArgument, "labels", absl::StrCat(labels.size(), " entries"), "at most 32 entries"});
  }
  for (const auto& [key, value] : labels) {
    if (auto status = CheckKey(key, "labels"); !status.ok()) return status;
    if (auto status = CheckValue(value, absl::StrCat("labels[\"", key, "\"]")); !status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status CheckRequestId(const std::string& request_id) {
  if (request_id.size() > 128 || !AllOf(request_id, "._:-", IsAlnum)) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "request_id", Shown(request_id),
                                 "empty, or 1 to 128 characters of [A-Za-z0-9._:-]"});
  }
  return absl::OkStatus();
}

absl::StatusOr<std::map<std::string, std::string>> ParseLabelSelector(const std::string& selector) {
  std::map<std::string, std::string> terms;
  if (selector.empty()) return terms;
  size_t begin = 0;
  while (begin <= selector.size()) {
    const size_t end = std::min(selector.find(',', begin), selector.size());
    const std::string term = selector.substr(begin, end - begin);
    const size_t equals = term.find('=');
    const auto malformed = InvalidArgumentError({ErrorReason::kInvalidArgument, "label_selector", Shown(selector),
                                                 "comma-separated key=value terms without spaces, each key once"});
    if (equals == std::string::npos) return malformed;
    const std::string key = term.substr(0, equals), value = term.substr(equals + 1);
    if (!CheckKey(key, "label_selector").ok() || !CheckValue(value, "label_selector").ok()) return malformed;
    if (!terms.emplace(key, value).second) return malformed;
    begin = end + 1;
  }
  return terms;
}

bool MatchesLabels(const std::map<std::string, std::string>& labels, const std::map<std::string, std::string>& terms) {
  return std::all_of(terms.begin(), terms.end(), [&](const auto& term) {
    auto it = labels.find(term.first);
    return it != labels.end() && it->second == term.second;
  });
}

}  // namespace posbias::naming
