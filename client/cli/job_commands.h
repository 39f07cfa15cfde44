// The `posbias jobs ...` subcommands: submit a Jacobian-norm measurement job, get, watch (with a
// progress bar on stderr), list, cancel and rm jobs, and print (or plot) a finished job's result.
#pragma once

#include "CLI/CLI.hpp"
#include "client/cli/cli.h"

namespace posbias::cli {

// Adds the subcommands of `jobs` (the row's CLI::App) and returns the step that runs the chosen
// one.
CommandRun DefineJobCommands(CLI::App& jobs);

}  // namespace posbias::cli
