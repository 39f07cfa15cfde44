// `posbias jobs submit`: the flags of a Jacobian-norm job turned into a SubmitJobRequest (inputs,
// text layouts, needles, recall, versus), sent, and with --wait followed to its end.
#pragma once

#include "CLI/CLI.hpp"
#include "client/cli/cli.h"

namespace posbias::cli {

CommandRun DefineSubmit(CLI::App& command);

}  // namespace posbias::cli
