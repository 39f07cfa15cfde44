// The `posbias models ...` and `posbias jobs ...` subcommands (model registry and measurement jobs).
#pragma once

#include <memory>
#include <ostream>
#include <string>

#include "CLI/CLI.hpp"
#include "posbias/client.h"

namespace posbias::cli {

struct ResourceContext {
  Client* client;
  std::string format;  // table | json | csv
  std::string plot;    // SVG path for `jobs result`, "" = none
  std::ostream* out;
  std::ostream* err;
};

class ResourceCommands;
// Adds `models` and `jobs` with their subcommands to the app.
std::shared_ptr<ResourceCommands> AddResourceCommands(CLI::App& app);
// Runs the chosen one; -1 when neither `models` nor `jobs` was chosen.
int RunResourceCommands(ResourceCommands& commands, const ResourceContext& context);

}  // namespace posbias::cli
