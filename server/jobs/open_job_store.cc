#include <string>

#include "absl/strings/match.h"
#include "server/jobs/job_store.h"
#include "server/status/error.h"

namespace posbias::jobs {

absl::StatusOr<std::unique_ptr<JobStore>> OpenJobStore(const std::string& connection,
                                                       const std::string& default_sqlite_path, int64_t lease_ms,
                                                       int64_t part_samples, int max_lost_attempts) {
  if (connection.empty()) return OpenSqliteJobStore(default_sqlite_path, SystemClock(), max_lost_attempts);
  if (absl::StartsWith(connection, "postgresql://") || absl::StartsWith(connection, "postgres://")) {
    PostgresStoreOptions options;
    options.uri = connection;
    options.lease_ms = lease_ms;
    options.part_samples = part_samples;
    options.max_lost_attempts = max_lost_attempts;
    return OpenPostgresJobStore(std::move(options));
  }
  for (const char* prefix : {"sqlite://", "sqlite:"}) {
    if (absl::StartsWith(connection, prefix) && connection.size() > std::string(prefix).size()) {
      return OpenSqliteJobStore(connection.substr(std::string(prefix).size()), SystemClock(), max_lost_attempts);
    }
  }
  // Never echo the string: it may hold a password.
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "job_store", "(not shown)",
                               "empty (SQLite in the data directory), sqlite:PATH, or a PostgreSQL URI "
                               "postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"});
}

absl::Status ForEachJob(JobStore& store, ListFilter filter, const std::function<void(JobRecord&)>& visit) {
  filter.page_size = 1000;
  filter.page_token.clear();
  do {
    auto page = store.List(filter);
    if (!page.ok()) return page.status();
    for (auto& job : page->jobs) visit(job);
    filter.page_token = page->next_page_token;
  } while (!filter.page_token.empty());
  return absl::OkStatus();
}

std::vector<std::string> CancelJobsBoundTo(JobStore& store, const ModelBinding& model) {
  ListFilter filter;
  filter.bound_to = model;
  filter.states = {JobState::kQueued, JobState::kRunning};
  std::vector<JobRecord> active;
  (void)ForEachJob(store, std::move(filter), [&](JobRecord& job) { active.push_back(std::move(job)); });
  std::vector<std::string> cancelled;
  for (const auto& job : active) {
    if (store.Transition(job.id, StateAfterCancel(job.state), {}).ok()) cancelled.push_back(job.id);
  }
  return cancelled;
}

}  // namespace posbias::jobs
