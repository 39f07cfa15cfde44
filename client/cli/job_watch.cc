#include "client/cli/job_watch.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <limits>
#include <iomanip>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/output.h"
#include "client/cli/recall_output.h"
#include "client/cli/svg_plot.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

// A progress line on stderr: "[#####.....]  42.0 %  running  samples 3/8  ETA 12 s". On a
// terminal it is redrawn in place; elsewhere a line is written only when the state or the samples
// done change (a log gets one line per step, not one per update).
class ProgressLine {
 public:
  explicit ProgressLine(bool redraw) : redraw_(redraw) {}
  void Draw(std::ostream& err, const v1::Job& job);
  void End(std::ostream& err) const {
    if (redraw_) err << "\n";
  }

 private:
  bool redraw_;
  std::optional<std::pair<int, int64_t>> last_;  // (state, samples done) of the last line written.
};

void ProgressLine::Draw(std::ostream& err, const v1::Job& job) {
  const std::pair<int, int64_t> now{job.state(), job.progress().samples_done()};
  if (!redraw_ && last_ == now) return;
  last_ = now;
  const double fraction = std::clamp(job.progress().fraction(), 0.0, 1.0);
  const int filled = static_cast<int>(std::round(fraction * 30));
  err << (redraw_ ? "\r[" : "[") << std::string(filled, '#') << std::string(30 - filled, '.') << "] " << std::fixed
      << std::setprecision(1) << 100 * fraction << " %  "
      << LowerEnum(v1::JobState_Name(job.state()), "JOB_STATE_") << "  samples "
      << job.progress().samples_done() << "/" << job.progress().samples_total();
  if (job.progress().has_estimated_seconds_remaining()) {
    err << "  ETA " << static_cast<int64_t>(job.progress().estimated_seconds_remaining()) << " s";
  }
  err << (redraw_ ? "    " : "\n") << std::flush;
}

}  // namespace

nlohmann::ordered_json JobJson(const v1::Job& j) {
  const auto& spec = j.spec().jacobian_norm();
  nlohmann::ordered_json json = {
      {"id", j.id()},
      {"state", LowerEnum(v1::JobState_Name(j.state()), "JOB_STATE_")},
      {"progress", j.progress().fraction()},
      {"samples_done", j.progress().samples_done()},
      {"samples_total", j.progress().samples_total()},
      {"attempt", j.attempt()},
      {"device", j.device()},
      {"model", spec.model()},
      {"length", spec.sequence_length()},
      {"samples", spec.samples()},
      {"output", LowerEnum(v1::JacobianOutput_Name(spec.output()), "JACOBIAN_OUTPUT_")},
      {"method", LowerEnum(v1::JacobianMethod_Name(spec.method()), "JACOBIAN_METHOD_")},
      {"probes", spec.probes()},
      {"priority", j.spec().priority()},
      {"request_id", j.request_id()},
      {"labels", std::map<std::string, std::string>(j.labels().begin(), j.labels().end())}};
  // What the measurement keeps besides the full pathway's profile (shown when asked for).
  if (spec.pathway() == v1::JACOBIAN_PATHWAY_VALUE_ONLY) json["pathway"] = "value_only";
  if (spec.compare_pathways()) json["compare_pathways"] = true;
  if (spec.return_raw_samples()) json["raw_samples"] = true;
  if (spec.probe_distribution() != v1::PROBE_DISTRIBUTION_UNSPECIFIED) {
    json["probe_distribution"] = LowerEnum(v1::ProbeDistribution_Name(spec.probe_distribution()), "PROBE_DISTRIBUTION_");
  }
  if (j.progress().has_estimated_seconds_remaining()) {
    json["eta_seconds"] = j.progress().estimated_seconds_remaining();
  }
  if (j.has_error()) {
    json["error"] = {{"reason", v1::ErrorReason_Name(j.error().reason())},
                     {"message", j.error().message()}};
  }
  return json;
}

// A job, or the failed call's error.
int PrintJob(const CliContext& context, const absl::StatusOr<v1::Job>& job) {
  if (!job.ok()) return context.Fail(job.status());
  PrintObject(JobJson(*job), context.format, context.out);
  return 0;
}

// Follows a job until it ends; returns the last state seen.
absl::StatusOr<v1::Job> Watch(const CliContext& context, const std::string& id) {
  v1::Job last;
  ProgressLine progress(context.err_is_terminal);
  v1::WatchJobRequest request;
  request.set_id(id);
  CallSettings settings;
  settings.timeout = std::chrono::hours(24 * 365);
  auto status = context.client.WatchJob(
      request,
      [&](const v1::WatchJobResponse& message) {
        last = message.job();
        progress.Draw(context.err, last);
        return true;
      },
      settings);
  progress.End(context.err);
  if (!status.ok()) return status;
  return last;
}

}  // namespace posbias::cli
