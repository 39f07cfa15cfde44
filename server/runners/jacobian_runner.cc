#include "server/runners/jacobian_runner.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <mutex>
#include <optional>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/jacobian/engine.h"
#include "server/jobs/boundary_spikes.h"
#include "server/jobs/needle_sweep.h"
#include "server/measure/theory_report.h"
#include "server/status/error.h"

namespace posbias::runners {
namespace {

nlohmann::json RecordToJson(const jacobian::SampleRecord& record) {
  nlohmann::json json = {{"sq_norm", record.sq_norm}, {"probe_var", record.probe_var}, {"branch_ratio", record.branch_ratio}};
  if (!record.value_sq_norm.empty()) json["value_sq_norm"] = record.value_sq_norm;  // compare_pathways.
  if (!record.score_sq_norm.empty()) json["score_sq_norm"] = record.score_sq_norm;
  return json;
}

// The records of a checkpoint (or of a part's result). A damaged one is DATA_LOSS, never an
// exception in a worker thread.
absl::StatusOr<std::vector<jacobian::SampleRecord>> RecordsFromCheckpoint(const std::string& checkpoint) {
  std::vector<jacobian::SampleRecord> records;
  if (checkpoint.empty()) return records;
  const auto json = nlohmann::json::parse(checkpoint, nullptr, false);
  if (json.is_discarded() || !json.contains("samples")) return records;
  try {
    for (const auto& item : json.at("samples")) {
      jacobian::SampleRecord record;
      record.sq_norm = item.at("sq_norm").get<std::vector<std::vector<double>>>();
      record.probe_var = item.at("probe_var").get<std::vector<std::vector<double>>>();
      record.branch_ratio = item.at("branch_ratio").get<std::vector<double>>();
      if (item.contains("score_sq_norm")) {
        record.score_sq_norm = item.at("score_sq_norm").get<std::vector<std::vector<double>>>();
      }
      if (item.contains("value_sq_norm")) {
        record.value_sq_norm = item.at("value_sq_norm").get<std::vector<std::vector<double>>>();
      }
      records.push_back(std::move(record));
    }
  } catch (const nlohmann::json::exception& error) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, ErrorReason::kInternalError,
                           absl::StrCat("the job's checkpoint is damaged: ", error.what()));
  }
  return records;
}

// Whether every value of a finished sample is finite (a NaN or infinity must never reach a
// checkpoint: JSON writes it as null, which no later attempt could read back as a number).
bool IsFinite(const jacobian::SampleRecord& record) {
  auto finite = [](const std::vector<double>& values) {
    return std::all_of(values.begin(), values.end(), [](double v) { return std::isfinite(v); });
  };
  return std::all_of(record.sq_norm.begin(), record.sq_norm.end(), finite) &&
         std::all_of(record.probe_var.begin(), record.probe_var.end(), finite) && finite(record.branch_ratio);
}

absl::Status NotFinite(const std::string& model, int64_t sample) {
  return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kMeasurementNotFinite,
                         absl::StrCat("sample ", sample, " of the measurement on ", model,
                                      " has non-finite squared norms (NaN or infinity): the model's outputs overflow "
                                      "or its weights are not finite; try float32 or check the checkpoint"));
}

jacobian::MeasureOptions OptionsFor(const jobs::JacobianJobSpec& spec, const std::string& device) {
  jacobian::MeasureOptions options;
  options.length = spec.length;
  options.samples = spec.samples;
  options.target = spec.target;
  options.seed = spec.seed;
  options.embedding_std = spec.embedding_std;
  options.probes = spec.probes;
  options.probe_distribution = spec.probe_distribution;
  options.keep_samples = spec.keep_samples;
  options.device = device;
  options.method = spec.method;
  options.output = spec.output;
  options.input = spec.input;
  if (spec.input == jobs::JacobianInput::kGivenTokens) options.tokens = spec.tokens;
  options.dtype = jacobian::TorchDtype(spec.dtype);
  options.pathway = spec.pathway;
  options.compare_pathways = spec.compare_pathways;
  return options;
}

// The samples a job does not measure again: a merge's parts' records in sample order (nothing
// left to compute), or the checkpoint's of an earlier attempt; and the job's sample range.
absl::Status ResumeSamples(const jobs::JobRecord& job, jacobian::MeasureOptions& options) {
  if (job.parts_total > 0) {
    // Merging a job run in sample parts: their records in sample order, nothing left to compute.
    for (const std::string& part : job.part_results) {
      auto records = RecordsFromCheckpoint(part);
      if (!records.ok()) return records.status();
      options.done_samples.insert(options.done_samples.end(), records->begin(), records->end());
    }
    if (static_cast<int64_t>(options.done_samples.size()) != job.spec.samples) {
      return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                             absl::StrCat("job ", job.id, ": its ", job.part_results.size(), " parts hold ",
                                          options.done_samples.size(), " samples, not ", job.spec.samples));
    }
  } else {
    options.first_sample = job.sample_begin;
    options.end_sample = job.parent_id.empty() ? 0 : job.sample_end;
    auto records = RecordsFromCheckpoint(job.checkpoint);
    if (!records.ok()) return records.status();
    options.done_samples = *std::move(records);
    // A compare_pathways checkpoint written before the score pathway's norms were kept: its
    // samples are measured again rather than the job failing.
    if (job.spec.compare_pathways) {
      for (const auto& record : options.done_samples) {
        if (record.score_sq_norm.size() != record.sq_norm.size()) {
          options.done_samples.clear();
          break;
        }
      }
    }
  }
  return absl::OkStatus();
}

// The finished job's report: the measurement and its theory, the registration measured, and the
// text inputs' boundary spikes and the needle sweep where the job asked for them.
std::string ReportJson(const jobs::JobRecord& job, models::DecoderModel& model, const jacobian::MeasureOptions& options,
                       const jacobian::MeasureResult& result, const registry::ModelEntry& bound) {
  auto job_report = measure::BuildReport(model, options, result, job.spec.model);
  job_report.model.weights_sha256 = bound.weights_sha256;  // Provenance: the registration measured.
  job_report.model.source = std::string(registry::SourceKindName(bound.source.kind));
  job_report.model.uid = bound.uid;
  if (!job.spec.document_starts.empty()) {  // Text inputs: each start's spike, over the samples starting there.
    job_report.boundary_spikes = jobs::BoundarySpikes(job.spec.document_starts, result.sample_sq_norm);
  }
  if (job.spec.needle_sweep) job_report.needle_sweep = jobs::NeedleSweepShares(*job.spec.needle_sweep, result.sample_sq_norm);
  // GetJobResult reports the effective-depth fits when asked, or when the depth is unknown.
  job_report.theory.fit_effective_depth =
      job.spec.fit_effective_depth || model.config().family == models::Family::kTorchScript;
  job_report.job = jobs::ReportJob{job.id, job.attempt, static_cast<int64_t>(options.done_samples.size()), job.parts_total};
  return jobs::ReportToJson(job_report).dump();
}

}  // namespace

absl::StatusOr<std::string> JacobianRunner::Run(const jobs::JobRecord& job,
                                                const std::function<bool(const jobs::ProgressUpdate&)>& report) {
  // Bound to the registration it was submitted for (catalog's GetBound, by uid): never another
  // model, another tenant's of the same name neither.
  auto first = catalog_->GetBound(job.spec.model_uid, job.spec.model_weights_sha256, job.spec.model, job.tenant);
  if (!first.ok()) return first.status();
  const std::string path = registry::ModelPath(*first);
  // Jobs on the same model instance run one at a time, and exports wait for them (model_cache.h).
  std::lock_guard model_lock(cache_->InstanceLock(path, job.spec.dtype));
  auto model = cache_->Acquire(*catalog_, path, job.spec.dtype);
  if (!model.ok()) return model.status();
  // Still the same registration once loaded (a replacement in between evicts the cache's copy).
  auto bound = catalog_->GetBound(job.spec.model_uid, job.spec.model_weights_sha256, job.spec.model, job.tenant);
  if (!bound.ok()) return bound.status();
  if (registry::ModelPath(*bound) != path) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelChanged,
                           absl::StrCat("the model ", job.spec.model, " this job was submitted for changed while it loaded"));
  }
  const std::string device = job.device.empty() ? "cpu" : job.device;
  jacobian::MeasureOptions options = OptionsFor(job.spec, device);
  if (options_.cpu_threads > 0 && device == "cpu") torch::set_num_threads(options_.cpu_threads);
  if (auto status = ResumeSamples(job, options); !status.ok()) return status;
  nlohmann::json checkpoint = {{"samples", nlohmann::json::array()}};
  for (const auto& record : options.done_samples) checkpoint["samples"].push_back(RecordToJson(record));

  const auto start = std::chrono::steady_clock::now();
  const int64_t samples_here = job.parent_id.empty() ? job.spec.samples : job.sample_end - job.sample_begin;
  const double resumed_fraction = static_cast<double>(options.done_samples.size()) / samples_here;
  jacobian::Progress last;
  options.progress = [&](const jacobian::Progress& progress) {
    last = progress;
    jobs::ProgressUpdate update;
    update.progress = progress.fraction;
    update.samples_done = progress.samples_done;
    update.chunks_done = progress.chunks_done;
    update.chunks_total = progress.chunks_total;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gained = progress.fraction - resumed_fraction;
    update.eta_seconds = gained > 0 ? elapsed / gained * (1.0 - progress.fraction) : -1;
    return report(update);
  };
  std::optional<int64_t> not_finite;  // The first sample with a non-finite value.
  options.on_sample = [&](int64_t sample, const jacobian::SampleRecord& record) {
    if (!IsFinite(record)) {
      not_finite = sample;
      return false;  // Stops the measurement; nothing of this sample is stored.
    }
    checkpoint["samples"].push_back(RecordToJson(record));
    jobs::ProgressUpdate update;
    update.progress = last.fraction;
    update.samples_done = static_cast<int64_t>(checkpoint["samples"].size());
    update.chunks_done = last.chunks_done;
    update.chunks_total = last.chunks_total;
    update.checkpoint = checkpoint.dump();
    return report(update);
  };
  auto result = jacobian::Measure(**model, options);
  if (not_finite) return NotFinite(job.spec.model, *not_finite);
  if (!result.ok()) return result.status();
  last_vjp_count_ = result->vjp_count;
  if (!job.parent_id.empty()) {
    // A part's result is its samples' records (the checkpoint format); the merge reports.
    checkpoint["part"] = {{"sample_begin", job.sample_begin}, {"sample_end", job.sample_end}};
    return checkpoint.dump();
  }
  return ReportJson(job, **model, options, *result, *bound);
}

}  // namespace posbias::runners
