// The rules of names the clients choose, shared by models and jobs (model_service.proto's header):
// labels, label selectors and request ids. Each check names the field and what is allowed.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "server/limits/limits.h"

namespace posbias::naming {

inline constexpr size_t kMaxLabels = limits::Default<size_t>(limits::Limit::kMaxLabels);

// At most 32 entries; keys 1..63 characters of [a-z0-9][a-z0-9._/-]*, values 0..63 characters of
// [A-Za-z0-9._:/-]*. INVALID_ARGUMENT naming labels["key"] otherwise.
absl::Status CheckLabels(const std::map<std::string, std::string>& labels);

// Empty (no idempotency) or 1..128 characters of [A-Za-z0-9._:-].
absl::Status CheckRequestId(const std::string& request_id);

// A comma-separated list of key=value terms, no spaces (every term must match: logical AND); ""
// matches everything. The terms as a map; INVALID_ARGUMENT for a malformed or repeated term.
absl::StatusOr<std::map<std::string, std::string>> ParseLabelSelector(const std::string& selector);

// Whether `labels` has every key=value of `terms`.
bool MatchesLabels(const std::map<std::string, std::string>& labels, const std::map<std::string, std::string>& terms);

}  // namespace posbias::naming
