#include "server/jobs/job.h"

#include "server/status/error.h"

namespace posbias::jobs {

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

JobState StateAfterCancel(JobState from) {
  return from == JobState::kQueued ? JobState::kCancelled : JobState::kCancelling;
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
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "state", name,
                               "queued, running, cancelling, succeeded, failed or cancelled"});
}

}  // namespace posbias::jobs
