// libFuzzer harness: the JobService's request checks, as SubmitJob, ListJobs and GetJobResult
// run them, without a store or a gRPC server.
//
// Input: byte 0 chooses the RPC (value mod 3: SubmitJob, ListJobs, GetJobResult) and, for
// SubmitJob, the registered model (bits 2-4: gpt2-tiny, qwen2-tiny, cesaro, a TorchScript model,
// a FAILED model) and whether the server has a CUDA worker (bit 5); the rest is the serialized
// request. SubmitJob: api::RecordFromRequest, then admission::AdmitJob against that model
// (labels, request ids, lengths, samples, probes, token ids against the vocabulary, time limits,
// devices, raw values, memory). ListJobs: naming::ParseLabelSelector and MatchesLabels.
// GetJobResult: api::FillResultPage over a small finished job's report.
//
// Promises checked: every request is admitted or cleanly refused (fuzz_check.h); an admitted
// job's spec survives the store's JSON form unchanged and matches itself as a retry with the same
// request_id (RequestMatchesJob), and converts back to a Job message.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "posbias/v1/job_service.pb.h"
#include "server/admission/job_admission.h"
#include "server/naming/client_names.h"
#include "server/jobs/jacobian_report.h"
#include "server/jobs/jacobian_spec.h"
#include "server/models/config.h"
#include "server/registry/model_entry.h"
#include "server/api/job_convert.h"
#include "server/api/result_pages.h"
#include "tests/fuzz/libfuzzer/fuzz_check.h"

namespace {

namespace v1 = posbias::v1;
using posbias::fuzz::Require;
using posbias::fuzz::RequireCleanRefusal;
using posbias::registry::ModelEntry;

constexpr double kHostMemoryBytes = 16.0 * (uint64_t{1} << 30);

ModelEntry Entry(const std::string& preset) {
  ModelEntry entry;
  entry.name = preset;
  entry.builtin = true;
  entry.source.preset = preset;
  entry.config = *posbias::models::PresetConfig(preset);
  entry.state = posbias::registry::ModelState::kReady;
  return entry;
}

const std::vector<ModelEntry>& Models() {
  static const auto* models = [] {
    auto* all = new std::vector<ModelEntry>{Entry("gpt2-tiny"), Entry("qwen2-tiny"), Entry("cesaro")};
    ModelEntry torchscript = Entry("gpt2-tiny");
    torchscript.name = "scripted";
    torchscript.builtin = false;
    torchscript.source.kind = posbias::registry::SourceKind::kTorchScript;
    torchscript.config.family = posbias::models::Family::kTorchScript;
    torchscript.memory_bytes = 1 << 20;
    all->push_back(torchscript);
    ModelEntry failed = Entry("qwen2-tiny");
    failed.name = "broken";
    failed.builtin = false;
    failed.state = posbias::registry::ModelState::kFailed;
    failed.error_reason = "INVALID_MODEL_FILE";
    failed.error_message = "fuzz";
    all->push_back(failed);
    return all;
  }();
  return *models;
}

void Submit(const std::string& bytes, uint8_t choice) {
  v1::SubmitJobRequest request;
  if (!request.ParseFromString(bytes)) return;
  auto record = posbias::api::RecordFromRequest(request, /*drawn_seed=*/12345);
  if (!record.ok()) return RequireCleanRefusal(record.status(), "RecordFromRequest");
  const ModelEntry& model = Models()[(choice >> 2) % Models().size()];
  posbias::admission::JobLimits limits;
  limits.cuda_available = (choice & 0x20) != 0;
  const absl::Status admitted = posbias::admission::AdmitJob(*record, model, limits, kHostMemoryBytes);
  if (!admitted.ok()) return RequireCleanRefusal(admitted, "AdmitJob");
  Require(posbias::admission::MinimumJobBytes(record->spec, model) <= kHostMemoryBytes || limits.cuda_available,
          "AdmitJob admitted a job larger than the host");

  // What the store keeps is the spec's JSON; a retry with the same request_id compares with it.
  const auto json = posbias::jobs::SpecToJson(record->spec);
  const auto back = posbias::jobs::SpecFromJson(json);
  Require(back.ok(), "SpecFromJson refuses an admitted spec", back.status().ToString());
  Require(posbias::jobs::SpecToJson(*back) == json, "the admitted spec changes through its JSON form", json.dump());
  Require(posbias::api::RequestMatchesJob(*record, posbias::api::RequestNamesSeed(request), *record),
          "an admitted job does not match its own retry");
  v1::Job job;
  posbias::api::JobToProto(*record, &job);
}

void List(const std::string& bytes) {
  v1::ListJobsRequest request;
  if (!request.ParseFromString(bytes)) return;
  const auto terms = posbias::naming::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return RequireCleanRefusal(terms.status(), "ParseLabelSelector");
  // A job labelled exactly as the selector asks matches it.
  Require(posbias::naming::MatchesLabels(*terms, *terms), "a selector does not match its own labels");
  if (posbias::naming::CheckLabels(*terms).ok()) {
    std::string selector;
    for (const auto& [key, value] : *terms) selector += (selector.empty() ? "" : ",") + key + "=" + value;
    const auto again = posbias::naming::ParseLabelSelector(selector);
    Require(again.ok() && *again == *terms, "a selector of valid labels does not read back", selector);
  }
}

// A finished 8-position, 2-sample job on a 2-layer model, with everything a page can show.
const posbias::jobs::JacobianReport& Report() {
  static const auto* report = [] {
    auto* r = new posbias::jobs::JacobianReport;
    constexpr int kLength = 8;
    r->model.layers = 2;
    r->measurement.length = r->measurement.target = kLength;
    r->measurement.samples = 2;
    r->measurement.method = posbias::jobs::JacobianMethod::kHutchinson;
    std::vector<double> column;
    for (int j = 1; j <= kLength; ++j) column.push_back(1.0 / j);
    for (int j = 1; j <= kLength; ++j) r->positions.push_back(j);
    r->sq_norm_mean = r->sq_norm_std = r->sq_norm_stderr = column;
    r->norm_mean = r->norm_std = r->norm_stderr = column;
    r->sq_norm_estimator_stderr = column;
    r->layers = std::vector<posbias::jobs::LayerProfile>{{1, column, column}, {2, column, column}};
    r->branch_ratio = {0.5, 0.5};
    r->tokens = {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {9, 8, 7, 6, 5, 4, 3, 2, 1}};
    r->raw = std::vector<std::vector<double>>{column, column};
    posbias::jobs::FixedDepthFit fit;
    fit.alpha = 0.5;
    fit.lambda = 1;
    fit.profile = column;
    r->theory.depth = 2;
    r->theory.fits = std::vector<posbias::jobs::FixedDepthFit>{fit};
    return r;
  }();
  return *report;
}

void Result(const std::string& bytes) {
  v1::GetJobResultRequest request;
  if (!request.ParseFromString(bytes)) return;
  v1::GetJobResultResponse response;
  const absl::Status status = posbias::api::FillResultPage(request, Report(), &response);
  if (!status.ok()) return RequireCleanRefusal(status, "FillResultPage");
  for (uint32_t position : response.jacobian_norm().positions()) {
    Require(position >= 1 && position <= 8, "FillResultPage: a position outside 1..T");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (data[0] % 3) {
    case 0: Submit(bytes, data[0]); break;
    case 1: List(bytes); break;
    default: Result(bytes); break;
  }
  return 0;
}
