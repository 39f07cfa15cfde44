#include "server/jobs/store_common.h"


#include "absl/strings/str_cat.h"
#include "server/ids/random_id.h"
#include "nlohmann/json.hpp"
#include "server/status/error.h"

namespace posbias::jobs::internal {

using Json = nlohmann::json;

absl::Status InternalError(const std::string& message) {
  return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError, message);
}

absl::Status CheckSchemaVersion(int64_t version, int64_t latest) {
  if (version <= latest) return absl::OkStatus();
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInternalError,
                         absl::StrCat("job store schema version ", version, " is newer than this server supports (",
                                      latest, ")"));
}

absl::Status NotFound(const std::string& id) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kJobNotFound, absl::StrCat("job ", id, " does not exist"));
}

absl::Status NotCurrent(const std::string& id, int32_t attempt) {
  return ErrorWithReason(absl::StatusCode::kAborted, ErrorReason::kInternalError,
                         absl::StrCat("job ", id, " attempt ", attempt, " is no longer current"));
}

absl::Status Refused(const std::string& id, JobState from, JobState to) {
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kJobNotFinished,
                         absl::StrCat("job ", id, " is ", JobStateName(from), ": cannot become ", JobStateName(to)));
}

absl::Status QueueFull(int64_t queued, int64_t max_queued) {
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kQueueFull,
                         absl::StrCat("the job queue is full: ", queued, " jobs queued (limit ", max_queued, ", --max-queued)"));
}

absl::Status QuotaExceeded(const std::string& owner, int64_t queued, int64_t quota) {
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kQuotaExceeded,
                         absl::StrCat("principal ", owner, " has ", queued, " queued jobs, its quota (", quota,
                                      "); wait for some to start or cancel some"));
}

absl::Status TenantShareFull(const std::string& tenant, int64_t queued, int64_t share) {
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kQueueFull,
                         absl::StrCat("tenant ", tenant.empty() ? "(default)" : tenant, " has ", queued,
                                      " queued jobs, its share of the job queue (", share,
                                      ": --tenant-share of --max-queued) while other tenants' jobs wait too; wait for "
                                      "some to start or cancel some"));
}

absl::Status NoResult(const std::string& id, JobState state) {
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kJobNotFinished,
                         absl::StrCat("job ", id, " is ", JobStateName(state), ": it has no result"));
}

absl::Status StillActive(const std::string& id, JobState state) {
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kJobNotFinished,
                         absl::StrCat("job ", id, " is ", JobStateName(state),
                                      ": cancel it first or force the deletion"));
}

std::string SpecJson(const JacobianJobSpec& spec) {
  return SpecToJson(spec).dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string LabelsJson(const std::map<std::string, std::string>& labels) {
  Json json = Json::object();
  for (const auto& [key, value] : labels) json[key] = value;
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string EncodePageToken(int64_t created_ms, const std::string& id) {
  static constexpr char kDigits[] = "0123456789abcdef";
  const std::string plain = absl::StrCat(created_ms, "/", id);
  std::string token;
  token.reserve(plain.size() * 2);
  for (unsigned char c : plain) {
    token.push_back(kDigits[c >> 4]);
    token.push_back(kDigits[c & 0xf]);
  }
  return token;
}

namespace {
absl::Status BadPageToken(const std::string& token) {
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "page_token", token.substr(0, 64), "a token from the previous page"});
}
}  // namespace

absl::StatusOr<std::pair<int64_t, std::string>> DecodePageToken(const std::string& token) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  if (token.size() % 2 != 0 || token.size() > 1024) return BadPageToken(token);
  std::string plain;
  for (size_t i = 0; i < token.size(); i += 2) {
    const int high = nibble(token[i]), low = nibble(token[i + 1]);
    if (high < 0 || low < 0) return BadPageToken(token);
    plain.push_back(static_cast<char>(high * 16 + low));
  }
  const size_t slash = plain.find('/');
  if (slash == std::string::npos || slash == 0 || slash > 19 || slash + 1 == plain.size()) {
    return BadPageToken(token);
  }
  int64_t created_ms = 0;
  bool negative = false;
  size_t i = 0;
  if (plain[0] == '-') {
    negative = true;
    i = 1;
  }
  if (i == slash) return BadPageToken(token);
  for (; i < slash; ++i) {
    if (plain[i] < '0' || plain[i] > '9') return BadPageToken(token);
    created_ms = created_ms * 10 + (plain[i] - '0');
  }
  return std::make_pair(negative ? -created_ms : created_ms, plain.substr(slash + 1));
}

std::string RandomJobId() { return "j-" + ids::RandomHex(kJobIdRandomBits / 8); }

absl::StatusOr<JobRecord> RecordFromFields(const std::string& id, const std::string& spec_json,
                                           const std::string& labels_json, const std::string& state_name) {
  JobRecord job;
  job.id = id;
  const Json spec = Json::parse(spec_json, nullptr, /*allow_exceptions=*/false);
  absl::StatusOr<JacobianJobSpec> parsed = SpecFromJson(spec);
  if (spec.is_discarded() || !parsed.ok()) {
    return InternalError(absl::StrCat("job store: job ", id, " has a corrupt spec_json"));
  }
  job.spec = *std::move(parsed);
  const Json labels = Json::parse(labels_json, nullptr, /*allow_exceptions=*/false);
  if (!labels.is_object()) return InternalError(absl::StrCat("job store: job ", id, " has a corrupt labels_json"));
  for (const auto& [key, value] : labels.items()) {
    if (!value.is_string()) return InternalError(absl::StrCat("job store: job ", id, " has a corrupt labels_json"));
    job.labels[key] = value.get<std::string>();
  }
  absl::StatusOr<JobState> state = ParseJobState(state_name);
  if (!state.ok()) {
    return InternalError(absl::StrCat("job store: job ", id, " has an unknown state '", state_name, "'"));
  }
  job.state = *state;
  return job;
}

}  // namespace posbias::jobs::internal
