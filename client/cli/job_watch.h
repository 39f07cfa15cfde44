// A job as the CLI shows it: its JSON (get, watch, cancel, submit print it the same way), and
// following a job to its end with a progress bar on stderr.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "client/cli/cli.h"
#include "nlohmann/json.hpp"

namespace posbias::cli {

// The job as `posbias jobs get` prints it.
nlohmann::ordered_json JobJson(const v1::Job& j);
// Prints the job (or fails with its status); the exit code.
int PrintJob(const CliContext& context, const absl::StatusOr<v1::Job>& job);
// Watches the job until it ends, drawing its progress on context.err; the last state seen.
absl::StatusOr<v1::Job> Watch(const CliContext& context, const std::string& id);

}  // namespace posbias::cli
