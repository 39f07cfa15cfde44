// The `posbias models ...` subcommands: register, list, get, rm and export a model of the server's
// registry (a preset with overrides and a seed, a Hugging Face checkpoint or a TorchScript file).
#pragma once

#include "CLI/CLI.hpp"
#include "client/cli/cli.h"

namespace posbias::cli {

// Adds the subcommands of `models` (the row's CLI::App) and returns the step that runs the chosen
// one.
CommandRun DefineModelCommands(CLI::App& models);
// `posbias tokenize --model M (--text T | --text-file F)`: {"token_ids": [...], "offsets": [[start, end], ...]}.
CommandRun DefineTokenize(CLI::App& command);

}  // namespace posbias::cli
