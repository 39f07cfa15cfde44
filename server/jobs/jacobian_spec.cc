#include "server/jobs/jacobian_spec.h"

#include <algorithm>
#include <array>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
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
  return InvalidArgumentError({ErrorReason::kInvalidArgument, field, Shown(value), allowed});
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

absl::Status ReadIdLists(const Json& object, const char* key, std::vector<std::vector<int64_t>>& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return TypeError(std::string("spec.") + key, *it, "an array of arrays of integers");
  std::vector<std::vector<int64_t>> tokens;
  tokens.reserve(it->size());
  for (size_t s = 0; s < it->size(); ++s) {
    const Json& sequence = (*it)[s];
    const std::string field = std::string("spec.") + key + "[" + std::to_string(s) + "]";
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


// One enum's names, in enumerator order: the only place each word is spelled.
template <typename Enum, size_t N>
struct EnumNames {
  const char* field;                  // The spec member, for errors.
  std::array<std::string_view, N> names;

  std::string_view Name(Enum value) const { return names[static_cast<size_t>(value)]; }
  absl::StatusOr<Enum> Parse(std::string_view name) const {
    for (size_t i = 0; i < N; ++i) {
      if (names[i] == name) return static_cast<Enum>(i);
    }
    return InvalidArgumentError({ErrorReason::kInvalidArgument, field, std::string(name),
                                 absl::StrJoin(names, ", ", [](std::string* out, std::string_view n) {
                                   out->append(n.empty() ? std::string_view("\"\"") : n);
                                 })});
  }
};

constexpr EnumNames<JacobianMethod, 2> kMethods{"spec.method", {"exact", "hutchinson"}};
constexpr EnumNames<JacobianOutput, 4> kOutputs{"spec.output", {"final_hidden", "layer_sweep", "log_prob", "loss_gradient"}};
constexpr EnumNames<JacobianInput, 3> kInputs{"spec.input", {"random_tokens", "given_tokens", "gaussian_embeddings"}};
constexpr EnumNames<ComputeDtype, 4> kDtypes{"spec.dtype", {"float32", "bfloat16", "float16", "float64"}};
constexpr EnumNames<DevicePreference, 3> kDevices{"spec.device", {"", "cpu", "cuda"}};
constexpr EnumNames<Pathway, 2> kPathways{"spec.pathway", {"full", "value_only"}};
constexpr EnumNames<ProbeDistribution, 3> kProbeDistributions{"spec.probe_distribution",
                                                              {"gaussian", "rademacher", "orthogonal"}};

// Reads the optional string member `key` as one of `names`; missing or null keeps the default.
template <typename Enum, size_t N>
absl::Status ReadEnum(const Json& object, const char* key, const EnumNames<Enum, N>& names, Enum& out) {
  std::string name(names.Name(out));
  if (auto status = ReadString(object, key, name); !status.ok()) return status;
  auto parsed = names.Parse(name);
  if (!parsed.ok()) return parsed.status();
  out = *parsed;
  return absl::OkStatus();
}

}  // namespace

std::string_view MethodName(JacobianMethod method) { return kMethods.Name(method); }
absl::StatusOr<JacobianMethod> ParseMethod(std::string_view name) { return kMethods.Parse(name); }
std::string_view OutputName(JacobianOutput output) { return kOutputs.Name(output); }
absl::StatusOr<JacobianOutput> ParseOutput(std::string_view name) { return kOutputs.Parse(name); }
std::string_view InputName(JacobianInput input) { return kInputs.Name(input); }
absl::StatusOr<JacobianInput> ParseInput(std::string_view name) { return kInputs.Parse(name); }
std::string_view DtypeName(ComputeDtype dtype) { return kDtypes.Name(dtype); }
std::string_view DeviceName(DevicePreference device) { return kDevices.Name(device); }
absl::StatusOr<DevicePreference> ParseDevice(std::string_view name) { return kDevices.Parse(name); }
std::string_view PathwayName(Pathway pathway) { return kPathways.Name(pathway); }
std::string_view ProbeDistributionName(ProbeDistribution distribution) { return kProbeDistributions.Name(distribution); }
absl::StatusOr<ProbeDistribution> ParseProbeDistribution(std::string_view name) { return kProbeDistributions.Parse(name); }

absl::StatusOr<Pathway> ParsePathway(std::string_view name) {
  if (name == "value-only") return Pathway::kValueOnly;
  return kPathways.Parse(name);
}

absl::StatusOr<ComputeDtype> ParseDtype(std::string_view name) {
  if (name == "bf16") return ComputeDtype::kBfloat16;
  if (name == "fp16") return ComputeDtype::kFloat16;
  if (name == "fp32") return ComputeDtype::kFloat32;
  if (name == "fp64") return ComputeDtype::kFloat64;
  return kDtypes.Parse(name);
}

nlohmann::json SpecToJson(const JacobianJobSpec& spec) {
  Json json = Json::object();
  json["model"] = spec.model;
  if (!spec.model_uid.empty()) json["model_uid"] = spec.model_uid;
  if (!spec.model_weights_sha256.empty()) json["model_weights_sha256"] = spec.model_weights_sha256;
  json["length"] = spec.length;
  json["samples"] = spec.samples;
  json["target"] = spec.target;
  json["input"] = InputName(spec.input);
  json["tokens"] = spec.tokens;
  json["seed"] = spec.seed;
  json["embedding_std"] = spec.embedding_std;
  json["output"] = OutputName(spec.output);
  json["method"] = MethodName(spec.method);
  json["probes"] = spec.probes;
  json["probe_distribution"] = ProbeDistributionName(spec.probe_distribution);
  json["dtype"] = DtypeName(spec.dtype);
  json["device"] = DeviceName(spec.device);
  json["keep_samples"] = spec.keep_samples;
  json["fit_effective_depth"] = spec.fit_effective_depth;
  json["pathway"] = PathwayName(spec.pathway);
  json["compare_pathways"] = spec.compare_pathways;
  if (!spec.document_starts.empty()) json["document_starts"] = spec.document_starts;
  if (const auto& sweep = spec.needle_sweep) {
    json["needle_sweep"] = {{"depths", sweep->depths}, {"starts", sweep->starts},
                            {"needle_tokens", sweep->needle_tokens}, {"samples", sweep->samples}};
  }
  if (const auto& recall = spec.recall) {
    json["recall"] = {{"depths", recall->depths},           {"probes_per_depth", recall->probes_per_depth},
                      {"pairs", recall->pairs},             {"key_letters", recall->key_letters},
                      {"values", recall->values},           {"seed", recall->seed},
                      {"pair_starts", recall->pair_starts}, {"pair_tokens", recall->pair_tokens}};
    if (recall->token_ids) {
      json["recall"]["token_ids"] = {{"key_ids", recall->key_ids}, {"value_ids", recall->value_ids},
                                     {"filler_ids", recall->filler_ids}, {"trained_task_of", recall->trained_task_of}};
    }
  }
  if (!spec.versus.empty()) {
    Json versus = Json::array();
    for (const auto& model : spec.versus) {
      versus.push_back({{"model", model.model}, {"init", model.init}, {"uid", model.uid},
                        {"weights_sha256", model.weights_sha256}});
    }
    json["versus"] = std::move(versus);
    json["init_seed"] = spec.init_seed;
    if (spec.reference != 0) json["reference"] = spec.reference;
  }
  return json;
}

namespace {

// A comparison job's further models (absent in specs stored before comparisons: none).
absl::Status ReadVersus(const Json& json, JacobianJobSpec& spec) {
  auto it = json.find("versus");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return TypeError("spec.versus", *it, "an array of objects");
  for (const Json& item : *it) {
    if (!item.is_object()) return TypeError("spec.versus", item, "an object");
    JacobianJobSpec::VersusModel model;
    for (absl::Status status : {ReadString(item, "model", model.model), ReadBool(item, "init", model.init),
                                ReadString(item, "uid", model.uid),
                                ReadString(item, "weights_sha256", model.weights_sha256)}) {
      if (!status.ok()) return status;
    }
    spec.versus.push_back(std::move(model));
  }
  if (auto status = ReadUint64(json, "init_seed", spec.init_seed); !status.ok()) return status;
  if (json.contains("reference")) return ReadInt64(json, "reference", spec.reference);
  return absl::OkStatus();
}

// One list of integers at object[key] (absent: left as is).
absl::Status ReadIdList(const Json& object, const std::string& path, const char* key, std::vector<int64_t>& out) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_array()) return TypeError("spec." + path, *it, "an array of integers");
  out.clear();
  for (const Json& value : *it) {
    if (!IsInt64(value)) return TypeError("spec." + path, value, "a 64-bit integer");
    out.push_back(value.get<int64_t>());
  }
  return absl::OkStatus();
}

// Recall inputs (absent in specs stored before them).
absl::Status ReadRecall(const Json& json, JacobianJobSpec& spec) {
  auto it = json.find("recall");
  if (it == json.end() || it->is_null()) return absl::OkStatus();
  if (!it->is_object()) return TypeError("spec.recall", *it, "an object");
  JacobianJobSpec::RecallSweep recall;
  for (absl::Status status : {ReadInt64(*it, "probes_per_depth", recall.probes_per_depth),
                              ReadInt64(*it, "pairs", recall.pairs), ReadInt64(*it, "key_letters", recall.key_letters),
                              ReadString(*it, "values", recall.values), ReadUint64(*it, "seed", recall.seed),
                              ReadIdList(*it, "recall.pair_starts", "pair_starts", recall.pair_starts),
                              ReadIdList(*it, "recall.pair_tokens", "pair_tokens", recall.pair_tokens)}) {
    if (!status.ok()) return status;
  }
  const Json depths = it->value("depths", Json::array());
  if (!depths.is_array()) return TypeError("spec.recall.depths", depths, "an array of numbers");
  for (const Json& depth : depths) {
    if (!depth.is_number()) return TypeError("spec.recall.depths", depth, "a number");
    recall.depths.push_back(depth.get<double>());
  }
  if (auto ids = it->find("token_ids"); ids != it->end() && !ids->is_null()) {
    if (!ids->is_object()) return TypeError("spec.recall.token_ids", *ids, "an object");
    recall.token_ids = true;
    for (absl::Status status : {ReadIdList(*ids, "recall.token_ids.key_ids", "key_ids", recall.key_ids),
                                ReadIdList(*ids, "recall.token_ids.value_ids", "value_ids", recall.value_ids),
                                ReadIdList(*ids, "recall.token_ids.filler_ids", "filler_ids", recall.filler_ids),
                                ReadString(*ids, "trained_task_of", recall.trained_task_of)}) {
      if (!status.ok()) return status;
    }
    for (const auto* range : {&recall.key_ids, &recall.value_ids, &recall.filler_ids}) {
      if (range->size() != 2 || (*range)[0] >= (*range)[1]) {
        return TypeError("spec.recall.token_ids", *ids, "ranges of two ids [first, last) with first < last");
      }
    }
  }
  if (recall.pair_starts.size() != recall.pair_tokens.size() ||
      static_cast<int64_t>(recall.pair_starts.size()) != recall.probes_per_depth * static_cast<int64_t>(recall.depths.size())) {
    return TypeError("spec.recall.pair_starts", it->value("pair_starts", Json()), "one start and one length per probe");
  }
  spec.recall = std::move(recall);
  return absl::OkStatus();
}

}  // namespace

double JacobianJobSpec::RecallSweep::Chance() const {
  if (token_ids) return value_ids.size() == 2 ? 1.0 / static_cast<double>(value_ids[1] - value_ids[0]) : 0.0;
  return values.empty() ? 0.0 : 1.0 / static_cast<double>(values.size());
}

std::string JacobianJobSpec::RecallSweep::Description() const {
  if (!token_ids) return absl::StrCat("text: ", pairs, " key=value pairs, values of ", values.size(), " characters");
  const auto range = [](const std::vector<int64_t>& ids) { return absl::StrCat(ids.at(0), ":", ids.at(1)); };
  return absl::StrCat("token ids: ", pairs, " pairs, keys ", range(key_ids), ", values ", range(value_ids), ", filler ",
                      range(filler_ids), trained_task_of.empty() ? "" : absl::StrCat(" (the task ", trained_task_of, " was trained on)"));
}

absl::StatusOr<JacobianJobSpec> SpecFromJson(const nlohmann::json& json) {
  if (!json.is_object()) return TypeError("spec", json, "a JSON object");
  JacobianJobSpec spec;
  for (absl::Status status : {
           ReadString(json, "model", spec.model),
           ReadString(json, "model_uid", spec.model_uid),
           ReadString(json, "model_weights_sha256", spec.model_weights_sha256),
           ReadInt64(json, "length", spec.length),
           ReadInt64(json, "samples", spec.samples),
           ReadInt64(json, "target", spec.target),
           ReadEnum(json, "input", kInputs, spec.input),
           ReadIdLists(json, "tokens", spec.tokens),
           ReadUint64(json, "seed", spec.seed),
           ReadDouble(json, "embedding_std", spec.embedding_std),
           ReadEnum(json, "output", kOutputs, spec.output),
           ReadEnum(json, "method", kMethods, spec.method),
           ReadInt64(json, "probes", spec.probes),
           ReadEnum(json, "probe_distribution", kProbeDistributions, spec.probe_distribution),
           ReadEnum(json, "dtype", kDtypes, spec.dtype),
           ReadEnum(json, "device", kDevices, spec.device),
           ReadBool(json, "keep_samples", spec.keep_samples),
           ReadBool(json, "fit_effective_depth", spec.fit_effective_depth),
           ReadEnum(json, "pathway", kPathways, spec.pathway),
           ReadBool(json, "compare_pathways", spec.compare_pathways),
           ReadIdLists(json, "document_starts", spec.document_starts),
       }) {
    if (!status.ok()) return status;
  }
  if (auto it = json.find("needle_sweep"); it != json.end() && !it->is_null()) {
    JacobianJobSpec::NeedleSweep sweep;
    if (!it->is_object()) return TypeError("spec.needle_sweep", *it, "an object");
    for (absl::Status status : {ReadIdLists(*it, "samples", sweep.samples), ReadInt64(*it, "needle_tokens", sweep.needle_tokens)}) {
      if (!status.ok()) return status;
    }
    const Json starts = it->value("starts", Json::array());
    if (!starts.is_array()) return TypeError("spec.needle_sweep.starts", starts, "an array of integers");
    for (const Json& start : starts) {
      if (!IsInt64(start)) return TypeError("spec.needle_sweep.starts", start, "a 64-bit integer");
      sweep.starts.push_back(start.get<int64_t>());
    }
    const Json depths = it->value("depths", Json::array());
    if (!depths.is_array()) return TypeError("spec.needle_sweep.depths", depths, "an array of numbers");
    for (const Json& depth : depths) {
      if (!depth.is_number()) return TypeError("spec.needle_sweep.depths", depth, "a number");
      sweep.depths.push_back(depth.get<double>());
    }
    if (sweep.starts.size() != sweep.depths.size()) {
      return TypeError("spec.needle_sweep.starts", it->value("starts", Json()), "one start per depth");
    }
    spec.needle_sweep = std::move(sweep);
  }
  if (auto status = ReadVersus(json, spec); !status.ok()) return status;
  if (auto status = ReadRecall(json, spec); !status.ok()) return status;
  return spec;
}

std::vector<SampleRange> SampleRangesOfUnits(const JacobianJobSpec& spec, int64_t unit_begin, int64_t unit_end) {
  const int64_t models = 1 + static_cast<int64_t>(spec.versus.size());
  std::vector<SampleRange> ranges(models);
  for (int64_t m = 0; m < models; ++m) {
    const int64_t first = m * spec.samples, last = first + spec.samples;  // This model's units.
    const int64_t begin = std::max(unit_begin, first), end = std::min(unit_end, last);
    if (begin < end) ranges[m] = SampleRange{begin - first, end - first};
  }
  return ranges;
}

}  // namespace posbias::jobs
