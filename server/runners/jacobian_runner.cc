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
#include "server/statistics/boundary_spikes.h"
#include "server/statistics/jacobian_comparison.h"
#include "server/statistics/needle_sweep.h"
#include "server/statistics/recall_sweep.h"
#include "server/measure/theory_report.h"
#include "server/models/model.h"
#include "server/status/error.h"

namespace posbias::runners {
namespace {

nlohmann::json RecordToJson(const jacobian::SampleRecord& record) {
  nlohmann::json json = {{"sq_norm", record.sq_norm}, {"probe_var", record.probe_var}, {"branch_ratio", record.branch_ratio}};
  if (!record.value_sq_norm.empty()) json["value_sq_norm"] = record.value_sq_norm;  // compare_pathways.
  if (!record.score_sq_norm.empty()) json["score_sq_norm"] = record.score_sq_norm;
  if (const auto& score = record.next_token) {  // Recall jobs.
    json["next_token"] = {{"log_prob", score->log_prob}, {"rank", score->rank}, {"ties", score->ties}};
  }
  return json;
}

// The records of one model in a checkpoint (an array of samples). A damaged one is DATA_LOSS,
// never an exception in a worker thread.
absl::StatusOr<std::vector<jacobian::SampleRecord>> RecordsFromJson(const nlohmann::json& items) {
  std::vector<jacobian::SampleRecord> records;
  try {
    for (const auto& item : items) {
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
      if (item.contains("next_token")) {
        const auto& score = item.at("next_token");
        record.next_token = jobs::NextTokenScore{score.at("log_prob").get<double>(), score.at("rank").get<int64_t>(),
                                                 score.at("ties").get<int64_t>()};
      }
      records.push_back(std::move(record));
    }
  } catch (const nlohmann::json::exception& error) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, ErrorReason::kInternalError,
                           absl::StrCat("the job's checkpoint is damaged: ", error.what()));
  }
  return records;
}

// A checkpoint's (or a part's result's) records: the first model's samples, and per model of
// `versus` its own (always `versus` lists; empty where nothing was kept yet).
struct CheckpointRecords {
  std::vector<jacobian::SampleRecord> samples;
  std::vector<std::vector<jacobian::SampleRecord>> versus;
};

absl::StatusOr<CheckpointRecords> RecordsFromCheckpoint(const std::string& checkpoint, size_t versus_count) {
  CheckpointRecords records;
  records.versus.resize(versus_count);
  if (checkpoint.empty()) return records;
  const auto json = nlohmann::json::parse(checkpoint, nullptr, false);
  if (json.is_discarded() || !json.contains("samples")) return records;
  auto samples = RecordsFromJson(json.at("samples"));
  if (!samples.ok()) return samples.status();
  records.samples = *std::move(samples);
  if (auto it = json.find("versus"); it != json.end() && it->is_array()) {
    for (size_t m = 0; m < versus_count && m < it->size(); ++m) {
      auto versus = RecordsFromJson((*it)[m]);
      if (!versus.ok()) return versus.status();
      records.versus[m] = *std::move(versus);
    }
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
  options.score_next_token = spec.recall.has_value();
  return options;
}

// The samples a job does not measure again: a merge's parts' records in sample order (nothing
// left to compute), or the checkpoint's of an earlier attempt. Per model of `versus`, its records
// likewise in `versus_done`.
absl::Status ResumeSamples(const jobs::JobRecord& job, jacobian::MeasureOptions& options,
                           std::vector<std::vector<jacobian::SampleRecord>>& versus_done) {
  const size_t versus_count = job.spec.versus.size();
  versus_done.assign(versus_count, {});
  if (job.parts_total > 0) {
    // Merging a job run in sample parts: their records in sample order, nothing left to compute.
    for (const std::string& part : job.part_results) {
      auto records = RecordsFromCheckpoint(part, versus_count);
      if (!records.ok()) return records.status();
      options.done_samples.insert(options.done_samples.end(), records->samples.begin(), records->samples.end());
      for (size_t m = 0; m < versus_count; ++m) {
        versus_done[m].insert(versus_done[m].end(), records->versus[m].begin(), records->versus[m].end());
      }
    }
    for (size_t m = 0; m <= versus_count; ++m) {
      const size_t held = m == 0 ? options.done_samples.size() : versus_done[m - 1].size();
      if (static_cast<int64_t>(held) != job.spec.samples) {
        return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                               absl::StrCat("job ", job.id, ": its ", job.part_results.size(), " parts hold ", held,
                                            " samples of model ", m + 1, ", not ", job.spec.samples));
      }
    }
    return absl::OkStatus();
  }
  auto records = RecordsFromCheckpoint(job.checkpoint, versus_count);
  if (!records.ok()) return records.status();
  options.done_samples = std::move(records->samples);
  versus_done = std::move(records->versus);
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
  return absl::OkStatus();
}

// Each sample's squared norms at positions 1..T.
std::vector<std::vector<double>> UpToTarget(const jacobian::MeasureResult& result) {
  std::vector<std::vector<double>> samples;
  for (const auto& sample : result.sample_sq_norm) {
    samples.emplace_back(sample.begin(), sample.begin() + std::min<int64_t>(result.target, static_cast<int64_t>(sample.size())));
  }
  return samples;
}

// The finished job's report: the measurement and its theory, the registration measured, and the
// text inputs' boundary spikes and the needle sweep where the job asked for them.
jobs::JacobianReport BaseReport(const jobs::JobRecord& job, models::DecoderModel& model,
                                const jacobian::MeasureOptions& options, const jacobian::MeasureResult& result,
                                const registry::ModelEntry& bound) {
  auto job_report = measure::BuildReport(model, options, result, job.spec.model);
  job_report.model.weights_sha256 = bound.weights_sha256;  // Provenance: the registration measured.
  job_report.model.source = std::string(registry::SourceKindName(bound.source.kind));
  job_report.model.uid = bound.uid;
  if (!job.spec.document_starts.empty()) {  // Text inputs: each start's spike, over the samples starting there.
    job_report.boundary_spikes = statistics::BoundarySpikes(job.spec.document_starts, result.sample_sq_norm);
  }
  if (job.spec.needle_sweep) job_report.needle_sweep = statistics::NeedleSweepShares(*job.spec.needle_sweep, result.sample_sq_norm);
  if (job.spec.recall) {
    job_report.recall = statistics::RecallSweepStatistics(*job.spec.recall, UpToTarget(result), result.next_token);
  }
  // GetJobResult reports the effective-depth fits when asked, or when the depth is unknown.
  job_report.theory.fit_effective_depth =
      job.spec.fit_effective_depth || model.config().family == models::Family::kTorchScript;
  job_report.job = jobs::ReportJob{job.id, job.attempt, static_cast<int64_t>(options.done_samples.size()), job.parts_total};
  return job_report;
}

// A comparison job's report part: every model against the first, with the text inputs' spikes.
absl::Status AddComparison(const jobs::JobRecord& job, const std::vector<statistics::MeasuredModel>& measured,
                           jobs::JacobianReport& report) {
  statistics::ComparisonOptions comparison_options;
  comparison_options.seed = job.spec.seed;
  comparison_options.reference = static_cast<size_t>(job.spec.reference);
  auto compared = statistics::CompareModels(measured, comparison_options);
  if (!compared.ok()) return compared.status();
  if (!job.spec.document_starts.empty()) {
    for (size_t m = 0; m < compared->size(); ++m) {
      (*compared)[m].boundary_spikes = statistics::BoundarySpikes(job.spec.document_starts, measured[m].samples);
    }
  }
  if (job.spec.recall) {  // Each model's recall table, and the correlation over all their cells.
    std::vector<const jobs::RecallSummary*> summaries;
    for (size_t m = 0; m < compared->size(); ++m) {
      (*compared)[m].recall = statistics::RecallSweepStatistics(*job.spec.recall, measured[m].samples, measured[m].next_token);
      summaries.push_back(&*(*compared)[m].recall);
    }
    report.recall_correlation = statistics::PooledRecallCorrelation(summaries);
  }
  report.comparison = *std::move(compared);
  return absl::OkStatus();
}

// One model of the job, bound and loaded (the first one, or a registered one of `versus`).
struct Loaded {
  std::shared_ptr<models::DecoderModel> model;
  registry::ModelEntry bound;
  std::timed_mutex* lock = nullptr;  // The cache's instance lock (null for a model built for the job).
};

// Every wait of a run (for an instance lock, for room in the model cache) asks this whether to
// stop: the job was cancelled, ran past its time limit, lost its lease or the server is shutting
// down. It asks the worker through `report` (with the last progress, so nothing moves back), at
// most once a second; the worker then records why the job stopped.
class StopCheck {
 public:
  // Starts from the job's stored progress (a resumed job's waits do not show it back at 0).
  StopCheck(const jobs::JobRecord& job, const std::function<bool(const jobs::ProgressUpdate&)>& report)
      : report_(report) {
    last_.progress = job.progress;
    last_.samples_done = job.samples_done;
    last_.chunks_done = job.chunks_done;
    last_.chunks_total = job.chunks_total;
    last_.eta_seconds = job.eta_seconds;
  }

  // What the measurement reports goes through here, so the check knows the last progress.
  bool Report(const jobs::ProgressUpdate& update) {
    last_ = update;
    last_.checkpoint.clear();  // Already stored; a check never writes it again.
    asked_ = std::chrono::steady_clock::now();
    stopped_ = !report_(update);
    return !stopped_;
  }
  bool operator()() {
    if (stopped_) return true;
    if (std::chrono::steady_clock::now() - asked_ < std::chrono::seconds(1)) return false;
    return !Report(last_);
  }
  registry::Cancelled AsCancelled() {
    return [this] { return (*this)(); };
  }

 private:
  const std::function<bool(const jobs::ProgressUpdate&)>& report_;
  jobs::ProgressUpdate last_;
  std::chrono::steady_clock::time_point asked_{};
  bool stopped_ = false;
};

absl::StatusOr<Loaded> Load(registry::ModelCatalog* catalog, registry::ModelCache* cache, const jobs::JobRecord& job,
                            const std::string& name, const std::string& uid, const std::string& sha256,
                            const registry::Cancelled& stop) {
  // Bound to the registration it was submitted for (catalog's GetBound, by uid): never another
  // model, another tenant's of the same name neither.
  auto first = catalog->GetBound(uid, sha256, name, job.tenant);
  if (!first.ok()) return first.status();
  const std::string path = registry::ModelPath(*first);
  Loaded loaded;
  // Jobs on the same model instance run one at a time, and exports wait for them (model_cache.h).
  loaded.lock = &cache->InstanceLock(path, job.spec.dtype);
  auto lock = registry::ModelCache::LockInstance(*loaded.lock, stop);
  if (!lock.ok()) return lock.status();
  auto model = cache->Acquire(*catalog, path, job.spec.dtype, stop);
  if (!model.ok()) return model.status();
  // Still the same registration once loaded (a replacement in between evicts the cache's copy).
  auto bound = catalog->GetBound(uid, sha256, name, job.tenant);
  if (!bound.ok()) return bound.status();
  if (registry::ModelPath(*bound) != path) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelChanged,
                           absl::StrCat("the model ", name, " this job was submitted for changed while it loaded"));
  }
  loaded.model = *std::move(model);
  loaded.bound = *std::move(bound);
  return loaded;
}

// The samples each model measures in this run (index 0 the first model, 1 + i = versus[i]): all
// of them, or a part's share of the job's units of work (jacobian_spec.h SampleRangesOfUnits).
std::vector<jobs::SampleRange> RangesOf(const jobs::JobRecord& job) {
  if (job.parent_id.empty()) {
    return std::vector<jobs::SampleRange>(1 + job.spec.versus.size(), jobs::SampleRange{0, job.spec.samples});
  }
  return jobs::SampleRangesOfUnits(job.spec, job.unit_begin, job.unit_end);
}

// Restricts a measurement to one model's range (the whole job's samples are 0 .. samples).
void SetRange(jacobian::MeasureOptions& options, const jobs::JobRecord& job, const jobs::SampleRange& range) {
  options.first_sample = range.begin;
  options.end_sample = job.parent_id.empty() ? 0 : range.end;
}

// Where one model's measurement stands in this run: the units of work before it (the earlier
// models' ranges, finished) and in all, its own range, its name (messages), its records in the
// checkpoint (appended to as samples finish), and the reporter. Progress counts units: a
// comparison's samples_done runs over every model's samples, not from 0 again for each.
struct Stage {
  int64_t units_before = 0, units_total = 1;
  jobs::SampleRange range;
  std::string name;
  nlohmann::json* records = nullptr;
  nlohmann::json* checkpoint = nullptr;
  StopCheck* report = nullptr;
};

// One model over its range's samples (those not in options.done_samples), under its instance
// lock; each finished sample is appended to the checkpoint and reported.
absl::StatusOr<jacobian::MeasureResult> MeasureOne(Loaded& loaded, jacobian::MeasureOptions& options,
                                                   const Stage& stage) {
  std::unique_lock<std::timed_mutex> lock;
  if (loaded.lock != nullptr) {
    auto held = registry::ModelCache::LockInstance(*loaded.lock, stage.report->AsCancelled());
    if (!held.ok()) return held.status();
    lock = *std::move(held);
  }
  const auto start = std::chrono::steady_clock::now();
  const double units = static_cast<double>(stage.range.size());
  const double resumed_fraction = static_cast<double>(options.done_samples.size()) / units;
  const double units_after = static_cast<double>(stage.units_total - stage.units_before) - units;
  // The run's fraction: the units finished before this model, and this model's share done.
  auto overall = [&](double fraction) {
    return (static_cast<double>(stage.units_before) + fraction * units) / static_cast<double>(stage.units_total);
  };
  jacobian::Progress last;
  options.progress = [&](const jacobian::Progress& progress) {
    last = progress;
    jobs::ProgressUpdate update;
    update.progress = overall(progress.fraction);
    update.samples_done = stage.units_before + progress.samples_done;
    update.chunks_done = progress.chunks_done;
    update.chunks_total = progress.chunks_total;
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double gained = (progress.fraction - resumed_fraction) * units;  // Units measured here so far.
    update.eta_seconds = gained > 0 ? elapsed / gained * ((1.0 - progress.fraction) * units + units_after) : -1;
    return stage.report->Report(update);
  };
  std::optional<int64_t> not_finite;  // The first sample with a non-finite value.
  options.on_sample = [&](int64_t sample, const jacobian::SampleRecord& record) {
    if (!IsFinite(record)) {
      not_finite = sample;
      return false;  // Stops the measurement; nothing of this sample is stored.
    }
    stage.records->push_back(RecordToJson(record));
    jobs::ProgressUpdate update;
    update.progress = overall(last.fraction);
    update.samples_done = stage.units_before + static_cast<int64_t>(stage.records->size());
    update.chunks_done = last.chunks_done;
    update.chunks_total = last.chunks_total;
    update.checkpoint = stage.checkpoint->dump();
    return stage.report->Report(update);
  };
  auto result = jacobian::Measure(*loaded.model, options);
  if (not_finite) return NotFinite(stage.name, *not_finite);
  return result;
}

// Comparison jobs: the index-th model of `versus` over its stage's range of the reference's
// samples, resumed from `done`.
absl::StatusOr<statistics::MeasuredModel> MeasureVersus(registry::ModelCatalog* catalog, registry::ModelCache* cache,
                                                  const jobs::JobRecord& job, const models::ModelConfig& first, size_t index,
                                                  std::vector<jacobian::SampleRecord>& done, const Stage& stage,
                                                  int64_t& vjps) {
  const auto& versus = job.spec.versus[index];
  Loaded loaded;
  if (versus.init) {
    // The reference's architecture at a seeded initialization, built for this job alone (its
    // room in the model cache's budget held while it lives).
    auto built = cache->BuildForJob(absl::StrCat(job.spec.model, " (init, seed ", job.spec.init_seed, ")"), first,
                                    job.spec.init_seed, stage.report->AsCancelled());
    if (!built.ok()) return built.status();
    loaded.model = *std::move(built);
  } else {
    auto bound = Load(catalog, cache, job, versus.model, versus.uid, versus.weights_sha256, stage.report->AsCancelled());
    if (!bound.ok()) return bound.status();
    loaded = *std::move(bound);
  }
  jacobian::MeasureOptions options = OptionsFor(job.spec, job.device.empty() ? "cpu" : job.device);
  // The same inputs as the first model's: its random ids (the same seed, drawn from its
  // vocabulary; a part holding only this model's samples draws them too), the given ids, or the
  // Gaussian embeddings and probes of the same seed.
  if (job.spec.input == jobs::JacobianInput::kRandomTokens) options.draw_vocab_size = first.vocab_size;
  SetRange(options, job, stage.range);
  options.done_samples = std::move(done);
  auto result = MeasureOne(loaded, options, stage);
  if (!result.ok()) return result.status();
  vjps += result->vjp_count;
  return statistics::MeasuredModel{stage.name, loaded.bound.uid, loaded.bound.weights_sha256, UpToTarget(*result),
                             result->next_token};
}

}  // namespace

// A comparison job holds one model at a time: the first model is let go before the next one is
// loaded or built, and each model of `versus` before the one after it. A job whose models fit the
// model cache one by one (what admission checks) therefore always runs, and no job waits for
// room while holding room itself (two such jobs could otherwise wait on each other for good).
absl::StatusOr<std::string> JacobianRunner::Run(const jobs::JobRecord& job,
                                                const std::function<bool(const jobs::ProgressUpdate&)>& report) {
  StopCheck stop(job, report);
  // The first model is loaded even by a part that measures none of its samples: it gives the
  // inputs' token ids and `init`'s architecture.
  auto first = Load(catalog_, cache_, job, job.spec.model, job.spec.model_uid, job.spec.model_weights_sha256,
                    stop.AsCancelled());
  if (!first.ok()) return first.status();
  const std::string device = job.device.empty() ? "cpu" : job.device;
  jacobian::MeasureOptions options = OptionsFor(job.spec, device);
  if (options_.cpu_threads > 0 && device == "cpu") torch::set_num_threads(options_.cpu_threads);
  std::vector<std::vector<jacobian::SampleRecord>> versus_done;
  if (auto status = ResumeSamples(job, options, versus_done); !status.ok()) return status;
  nlohmann::json checkpoint = {{"samples", nlohmann::json::array()}};
  for (const auto& record : options.done_samples) checkpoint["samples"].push_back(RecordToJson(record));
  if (!job.spec.versus.empty()) checkpoint["versus"] = nlohmann::json::array();
  for (const auto& records : versus_done) {
    checkpoint["versus"].push_back(nlohmann::json::array());
    for (const auto& record : records) checkpoint["versus"].back().push_back(RecordToJson(record));
  }
  // Each model's range in this run, and the units of work in all.
  const std::vector<jobs::SampleRange> ranges = RangesOf(job);
  int64_t units_total = 0;
  for (const auto& range : ranges) units_total += range.size();
  int64_t units_before = 0;
  auto stage = [&](size_t m, const std::string& name, nlohmann::json* records) {
    return Stage{units_before, units_total, ranges[m], name, records, &checkpoint, &stop};
  };
  std::optional<jobs::JacobianReport> job_report;  // A whole job's (a part's result is its records).
  int64_t vjps = 0;
  std::vector<statistics::MeasuredModel> measured;
  if (!ranges[0].empty()) {
    SetRange(options, job, ranges[0]);
    auto own = MeasureOne(*first, options, stage(0, job.spec.model, &checkpoint["samples"]));
    if (!own.ok()) return own.status();
    vjps += own->vjp_count;
    measured.push_back({job.spec.model, first->bound.uid, first->bound.weights_sha256, UpToTarget(*own), own->next_token});
    units_before += ranges[0].size();
    if (job.parent_id.empty()) {
      auto lock = registry::ModelCache::LockInstance(*first->lock, stop.AsCancelled());  // The report reads the model.
      if (!lock.ok()) return lock.status();
      job_report = BaseReport(job, *first->model, options, *own, first->bound);
    }
  }
  const models::ModelConfig first_config = first->model->config();
  first->model.reset();  // One model at a time: the next one may need its room.
  for (size_t i = 0; i < job.spec.versus.size(); ++i) {
    if (ranges[i + 1].empty()) continue;
    const std::string name = job.spec.versus[i].init ? std::string(jobs::kVersusInit) : job.spec.versus[i].model;
    auto other = MeasureVersus(catalog_, cache_, job, first_config, i, versus_done[i],
                               stage(i + 1, name, &checkpoint["versus"][i]), vjps);
    if (!other.ok()) return other.status();
    measured.push_back(*std::move(other));
    units_before += ranges[i + 1].size();
  }
  last_vjp_count_ = vjps;
  if (!job.parent_id.empty()) {
    // A part's result is its models' records (the checkpoint format); the merge reports.
    checkpoint["part"] = {{"unit_begin", job.unit_begin}, {"unit_end", job.unit_end}};
    return checkpoint.dump();
  }
  if (!job.spec.versus.empty()) {
    if (auto status = AddComparison(job, measured, *job_report); !status.ok()) return status;
  }
  return jobs::ReportToJson(*job_report).dump();
}

}  // namespace posbias::runners
