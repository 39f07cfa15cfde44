#include "client/cli/job_commands.h"

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
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/cli/job_result_output.h"
#include "client/cli/job_submit.h"
#include "client/cli/job_watch.h"
#include "client/cli/output.h"
#include "client/cli/recall_output.h"
#include "client/cli/svg_plot.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {
namespace {

// --------------------------------------------------------- get, watch, cancel, rm, result

struct JobIdFlags {
  std::string id;
  bool force = false;  // rm
};

std::shared_ptr<JobIdFlags> AddId(CLI::App& command) {
  auto flags = std::make_shared<JobIdFlags>();
  command.add_option("id", flags->id, "Job id")->required();
  return flags;
}

int RunGet(const CliContext& context, const JobIdFlags& flags) {
  v1::GetJobRequest request;
  request.set_id(flags.id);
  return PrintJob(context, context.client.GetJob(request));
}

int RunWatch(const CliContext& context, const JobIdFlags& flags) {
  return PrintJob(context, Watch(context, flags.id));
}

int RunCancel(const CliContext& context, const JobIdFlags& flags) {
  v1::CancelJobRequest request;
  request.set_id(flags.id);
  return PrintJob(context, context.client.CancelJob(request));
}

int RunRm(const CliContext& context, const JobIdFlags& flags) {
  v1::DeleteJobRequest request;
  request.set_id(flags.id);
  request.set_force(flags.force);
  return context.ReportDeleted(context.client.DeleteJob(request).status(), "job", flags.id);
}

int RunResult(const CliContext& context, const JobIdFlags& flags) {
  auto whole = WholeResult(context, flags.id);
  if (!whole.ok()) return context.Fail(whole.status());
  const auto& result = whole->jacobian_norm();
  if (context.format == Format::kJson) {
    // The report as the server wrote it (posbias-measure's document), with the text inputs'
    // document starts, which only the typed result holds.
    auto report = nlohmann::ordered_json::parse(whole->report_json(), nullptr, false);
    if (report.is_object() && result.document_starts_size() > 0) {
      auto& starts = report["document_starts"] = nlohmann::ordered_json::array();
      for (const auto& marks : result.document_starts()) {
        starts.push_back(std::vector<uint32_t>(marks.positions().begin(), marks.positions().end()));
      }
    }
    context.out << (report.is_discarded() ? whole->report_json() : report.dump(2)) << "\n";
  } else {
    PrintResultTable(context, result);
    PrintComparison(context, result);
    // A comparison names every model's spikes above; otherwise the job's model's, here.
    const auto& spikes = result.boundary_spikes();
    for (int i = 0; result.comparison_size() == 0 && i < spikes.size(); ++i) {
      const auto& spike = spikes[i];
      context.out << "boundary at " << spike.position() << ": spike ratio " << spike.ratio();
      if (spike.has_ratio_mean()) {
        context.out << "; per sample " << spike.ratio_mean() << " +- " << spike.ratio_stderr() << " (n = " << spike.samples()
                    << ")";
      }
      context.out << "\n";
    }
    if (result.needle_sweep_size() > 0) {
      context.out << "needle depth  start  share of sum ||J||^2 (+- se)  filler alone (+- se)  fillers\n";
      for (const auto& d : result.needle_sweep()) {
        context.out << absl::StrFormat("%12.4g  %5u  %12.6g +- %-12.4g  %10.6g +- %-10.4g  %7u\n", d.depth(), d.start(),
                                       d.share_mean(), d.share_stderr(), d.baseline_share_mean(),
                                       d.baseline_share_stderr(), d.fillers());
      }
    }
    PrintRecall(context.out, result);
  }
  return context.plot.empty() ? 0 : PlotResult(context, Measured(*whole), result);
}

CommandRun DefineGet(CLI::App& command) { return RunWith(AddId(command), RunGet); }
CommandRun DefineWatch(CLI::App& command) { return RunWith(AddId(command), RunWatch); }
CommandRun DefineCancel(CLI::App& command) { return RunWith(AddId(command), RunCancel); }
CommandRun DefineResult(CLI::App& command) { return RunWith(AddId(command), RunResult); }

CommandRun DefineRm(CLI::App& command) {
  auto flags = AddId(command);
  command.add_flag("--force", flags->force, "Delete even if it is queued or running");
  return RunWith(flags, RunRm);
}

// --------------------------------------------------------------------------------------- list

struct ListFlags {
  std::vector<std::string> states;
  std::string model;
};

int RunList(const CliContext& context, const ListFlags& flags) {
  v1::ListJobsRequest request;
  request.set_model(flags.model);
  for (const std::string& name : flags.states) {
    v1::JobState state;
    if (!v1::JobState_Parse("JOB_STATE_" + absl::AsciiStrToUpper(name), &state) || state == v1::JOB_STATE_UNSPECIFIED) {
      return context.UsageError("--state " + name +
                                " is invalid: allowed queued, running, cancelling, succeeded, "
                                "failed, cancelled");
    }
    request.add_states(state);
  }
  nlohmann::ordered_json items = nlohmann::ordered_json::array();
  const absl::Status status = FetchAllPages(
      request, [&](const v1::ListJobsRequest& page) { return context.client.ListJobs(page); },
      [&](const v1::ListJobsResponse& page) {
        for (const auto& job : page.jobs()) items.push_back(JobJson(job));
      });
  if (!status.ok()) return context.Fail(status);
  PrintList(items, {"id", "state", "progress", "model", "length", "samples", "method"},
            context.format, context.out);
  return 0;
}

CommandRun DefineList(CLI::App& command) {
  auto flags = std::make_shared<ListFlags>();
  command.add_option("--state", flags->states,
                     "queued, running, cancelling, succeeded, failed or cancelled (repeatable, or comma-separated: "
                     "jobs in any of them)")
      ->delimiter(',');
  command.add_option("--model", flags->model, "Only jobs on this model");
  return RunWith(flags, RunList);
}

// -------------------------------------------------------------------------------------- quota

struct NoFlags {};

int RunQuota(const CliContext& context, const NoFlags&) {
  auto quota = context.client.GetQuota();
  if (!quota.ok()) return context.Fail(quota.status());
  nlohmann::ordered_json json = {
      {"principal", quota->principal()},
      {"tenant", quota->tenant()},
      {"role", LowerEnum(v1::AccessRole_Name(quota->role()), "ACCESS_ROLE_")},
      {"queued_jobs", quota->queued_jobs()},
      {"max_queued_jobs", quota->max_queued_jobs()},
      {"running_jobs", quota->running_jobs()},
      {"max_running_jobs", quota->max_running_jobs()}};
  // 0 = no quota of the principal's own (the server's limits still hold): in a table, said in
  // words; JSON keeps the number.
  if (context.format == Format::kTable) {
    for (const char* key : {"max_queued_jobs", "max_running_jobs"}) {
      if (json[key] == 0) json[key] = "no limit of its own";
    }
  }
  PrintObject(json, context.format, context.out);
  return 0;
}

CommandRun DefineQuota(CLI::App&) { return RunWith(std::make_shared<NoFlags>(), RunQuota); }

// The subcommands of `jobs`, in the order --help lists them: a new one is one more row.
constexpr CommandSpec kJobCommands[] = {
    {"submit", "Submit a Jacobian-norm job", DefineSubmit},
    {"get", "Show a job", DefineGet},
    {"watch", "Follow a job with a progress bar until it ends", DefineWatch},
    {"cancel", "Cancel a job (a running one stops at its next chunk)", DefineCancel},
    {"rm", "Delete a job", DefineRm},
    {"result", "Print a finished job's result (--plot FILE.svg draws it)", DefineResult},
    {"list", "List jobs, newest first", DefineList},
    {"quota", "Your principal, tenant and role; your job quotas and what you use of them", DefineQuota},
};

}  // namespace

CommandRun DefineJobCommands(CLI::App& jobs) { return AddCommands(jobs, kJobCommands); }

}  // namespace posbias::cli
