#include "server/jobs/job.h"

#include <limits>
#include <utility>

#include "server/status/error.h"

namespace posbias::jobs {
namespace {

using Json = nlohmann::json;

// A stored or submitted value as it appears in a message: its JSON text, cut at 64 characters.
std::string Shown(const Json& value) {
  constexpr size_t kMaxChars = 64;
  std::string text = value.dump(-1, ' ', true, Json::error_handler_t::replace);
  if (text.size() > kMaxChars) text = text.substr(0, kMaxChars) + "...";
  return text;
}

absl::Status TypeError(const std::string& field, const Json& value, const std::string& allowed) {
  return InvalidArgumentError({"INVALID_ARGUMENT", field, Shown(value), allowed});
}

bool IsInt64(const Json& value) {
  if (value.is_number_unsigned()) {
    return value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  }
  return value.is_number_integer();
}

bool IsUint64(const Json& value) {
  if (value.is_number_unsigned()) return true;
  return value.is_number_integer() && value.get<int64_t>() >= 0;
}

// Reads the optional member `key` of `object` into `out`; a missing or null member keeps the default.
absl::Status ReadInt64(const Json& object, const char* key, int64_t& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!IsInt64(*it)) return TypeError(std::string("spec.") + key, *it, "a 64-bit integer");
  out = it->get<int64_t>();
  return absl::OkStatus();
}

absl::Status ReadUint64(const Json& object, const char* key, uint64_t& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!IsUint64(*it)) return TypeError(std::string("spec.") + key, *it, "an unsigned 64-bit integer");
  out = it->is_number_unsigned() ? it->get<uint64_t>() : static_cast<uint64_t>(it->get<int64_t>());
  return absl::OkStatus();
}

absl::Status ReadDouble(const Json& object, const char* key, double& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_number()) return TypeError(std::string("spec.") + key, *it, "a number");
  out = it->get<double>();
  return absl::OkStatus();
}

absl::Status ReadString(const Json& object, const char* key, std::string& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_string()) return TypeError(std::string("spec.") + key, *it, "a string");
  out = it->get<std::string>();
  return absl::OkStatus();
}

absl::Status ReadBool(const Json& object, const char* key, bool& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_boolean()) return TypeError(std::string("spec.") + key, *it, "true or false");
  out = it->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadTokens(const Json& object, std::vector<std::vector<int64_t>>& out) {
  auto it = object.find("tokens");
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return TypeError("spec.tokens", *it, "an array of arrays of integers");
  std::vector<std::vector<int64_t>> tokens;
  tokens.reserve(it->size());
  for (size_t s = 0; s < it->size(); ++s) {
    const Json& sequence = (*it)[s];
    const std::string field = "spec.tokens[" + std::to_string(s) + "]";
    if (!sequence.is_array()) return TypeError(field, sequence, "an array of integers");
    std::vector<int64_t> ids;
    ids.reserve(sequence.size());
    for (size_t j = 0; j < sequence.size(); ++j) {
      if (!IsInt64(sequence[j])) {
        return TypeError(field + "[" + std::to_string(j) + "]", sequence[j], "a 64-bit integer");
      }
      ids.push_back(sequence[j].get<int64_t>());
    }
    tokens.push_back(std::move(ids));
  }
  out = std::move(tokens);
  return absl::OkStatus();
}

}  // namespace

bool IsTerminal(JobState state) {
  return state == JobState::kSucceeded || state == JobState::kFailed || state == JobState::kCancelled;
}

bool IsAllowedTransition(JobState from, JobState to) {
  switch (from) {
    case JobState::kQueued:
      return to == JobState::kRunning || to == JobState::kCancelled;
    case JobState::kRunning:
      return to == JobState::kSucceeded || to == JobState::kFailed || to == JobState::kCancelling ||
             to == JobState::kQueued;
    case JobState::kCancelling:
      return to == JobState::kCancelled || to == JobState::kSucceeded || to == JobState::kFailed ||
             to == JobState::kQueued;
    case JobState::kSucceeded:
    case JobState::kFailed:
    case JobState::kCancelled:
      return false;
  }
  return false;
}

std::string JobStateName(JobState state) {
  switch (state) {
    case JobState::kQueued: return "queued";
    case JobState::kRunning: return "running";
    case JobState::kCancelling: return "cancelling";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

absl::StatusOr<JobState> ParseJobState(const std::string& name) {
  for (JobState state : {JobState::kQueued, JobState::kRunning, JobState::kCancelling,
                         JobState::kSucceeded, JobState::kFailed, JobState::kCancelled}) {
    if (name == JobStateName(state)) return state;
  }
  return InvalidArgumentError({"INVALID_ARGUMENT", "state", name,
                               "queued, running, cancelling, succeeded, failed or cancelled"});
}

nlohmann::json SpecToJson(const JacobianJobSpec& spec) {
  Json json = Json::object();
  json["model"] = spec.model;
  json["length"] = spec.length;
  json["samples"] = spec.samples;
  json["target"] = spec.target;
  json["input"] = spec.input;
  json["tokens"] = spec.tokens;
  json["seed"] = spec.seed;
  json["embedding_std"] = spec.embedding_std;
  json["output"] = spec.output;
  json["method"] = spec.method;
  json["probes"] = spec.probes;
  json["dtype"] = spec.dtype;
  json["device"] = spec.device;
  json["keep_samples"] = spec.keep_samples;
  json["fit_effective_depth"] = spec.fit_effective_depth;
  return json;
}

absl::StatusOr<JacobianJobSpec> SpecFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return TypeError("spec", json, "a JSON object");
  // Missing members keep their defaults (so older records stay readable); unknown members are
  // ignored (so newer ones do too). A member of the wrong type is an error.
  JacobianJobSpec spec;
  for (absl::Status status : {
           ReadString(json, "model", spec.model),
           ReadInt64(json, "length", spec.length),
           ReadInt64(json, "samples", spec.samples),
           ReadInt64(json, "target", spec.target),
           ReadString(json, "input", spec.input),
           ReadTokens(json, spec.tokens),
           ReadUint64(json, "seed", spec.seed),
           ReadDouble(json, "embedding_std", spec.embedding_std),
           ReadString(json, "output", spec.output),
           ReadString(json, "method", spec.method),
           ReadInt64(json, "probes", spec.probes),
           ReadString(json, "dtype", spec.dtype),
           ReadString(json, "device", spec.device),
           ReadBool(json, "keep_samples", spec.keep_samples),
           ReadBool(json, "fit_effective_depth", spec.fit_effective_depth),
       }) {
    if (!status.ok()) return status;
  }
  return spec;
}

}  // namespace posbias::jobs
