// The subcommands that ask the density service (and health): health, density (the continuum
// profile), discrete (the exact finite-L profile), summarize and fit. Each Define* adds its flags
// to the subcommand's CLI::App and returns its run step, a row of the table in cli.cc.
#pragma once

#include "CLI/CLI.hpp"
#include "client/cli/cli.h"

namespace posbias::cli {

CommandRun DefineHealth(CLI::App& command);
CommandRun DefineDensity(CLI::App& command);
CommandRun DefineDiscrete(CLI::App& command);
CommandRun DefineSummarize(CLI::App& command);
CommandRun DefineFit(CLI::App& command);

}  // namespace posbias::cli
