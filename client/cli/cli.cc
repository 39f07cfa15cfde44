#include "client/cli/cli.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <vector>

#include <unistd.h>

#include "client/cli/density_commands.h"
#include "client/cli/job_commands.h"
#include "client/cli/model_commands.h"
#include "client/cli/security_options.h"

#ifndef POSBIAS_VERSION
#define POSBIAS_VERSION "0.0.0"
#endif

namespace posbias::cli {
namespace {

// The top-level subcommands, in the order --help lists them: a new command is one more row.
constexpr CommandSpec kCommands[] = {
    {"health", "Check the server's health (overall or one service)", DefineHealth},
    {"density", "Continuum profile rho_H(x): density, log-density, CDF", DefineDensity},
    {"discrete", "Exact finite-L profile (coherent and incoherent)", DefineDiscrete},
    {"summarize", "Summaries of a theory or measured profile", DefineSummarize},
    {"fit", "Fit alpha (and a depth) to a measured profile", DefineFit},
    {"models", "The model registry: register, list, get, rm, export", DefineModelCommands},
    {"tokenize", "Text to token ids and byte offsets with a model's tokenizer", DefineTokenize},
    {"jobs", "Jacobian-norm measurement jobs: submit, get, watch, list, cancel, rm, result",
     DefineJobCommands},
};

// Options shared by every subcommand (accepted before or after the subcommand name).
struct SharedOptions {
  std::string server = "127.0.0.1:50051";
  std::string format = "table";
  std::string plot;
  double timeout_seconds = 60;
  ClientOptions::Security security;  // --token, --tls, --ca-file, ... (security_options.h)
};

void AddSharedOptions(CLI::App& app, SharedOptions& options) {
  if (const char* env = std::getenv("POSBIAS_SERVER")) options.server = env;
  app.add_option("--server,-s", options.server, "Server HOST:PORT (env POSBIAS_SERVER)")
      ->capture_default_str();
  app.add_option("--format,-f", options.format, "Output: table, json or csv")
      ->check(CLI::IsMember({"table", "json", "csv"}))
      ->capture_default_str();
  app.add_option("--plot", options.plot, "Also draw the curve(s) to this SVG file (log scale)");
  app.add_option("--timeout", options.timeout_seconds, "Deadline per call, seconds")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  AddSecurityOptions(app, options.security);
}

ClientOptions MakeClientOptions(const SharedOptions& options) {
  ClientOptions client;
  client.target = options.server;
  client.default_timeout =
      std::chrono::milliseconds(static_cast<long>(options.timeout_seconds * 1000));
  client.security = options.security;
  return client;
}

}  // namespace

int CliContext::Fail(const absl::Status& status) const {
  const std::string reason = ErrorReason(status);
  err << "error: " << absl::StatusCodeToString(status.code())
      << (reason.empty() ? "" : " [" + reason + "]") << " " << status.message() << "\n";
  if (status.code() == absl::StatusCode::kUnavailable && reason.empty()) {  // Not the server's own SHUTTING_DOWN.
    err << "hint: no posbias-server answered at " << (server.empty() ? "the default address" : server)
        << "; start one with `bash scripts/serve.sh`, or name another with --server HOST:PORT (or POSBIAS_SERVER)\n";
  }
  return kExitServerError;
}

int CliContext::UsageError(absl::string_view message) const {
  err << "error: " << message << "\n";
  return kExitUsage;
}

int CliContext::ReportDeleted(const absl::Status& status, absl::string_view what,
                              absl::string_view name) const {
  if (!status.ok()) return Fail(status);
  err << "deleted " << what << " " << name << "\n";
  return 0;
}

CommandRun AddCommands(CLI::App& parent, std::span<const CommandSpec> table) {
  parent.require_subcommand(1);
  std::vector<std::pair<const CLI::App*, CommandRun>> commands;
  for (const CommandSpec& spec : table) {
    CLI::App* command = parent.add_subcommand(spec.name, spec.help);
    commands.emplace_back(command, spec.define(*command));
  }
  return [commands = std::move(commands)](const CliContext& context) {
    for (const auto& [command, run] : commands) {
      if (command->parsed()) return run(context);
    }
    return kExitUsage;  // Not reached: parsing fails unless one subcommand was given.
  };
}

bool ParseLabels(const std::vector<std::string>& items,
                 google::protobuf::Map<std::string, std::string>* labels, std::ostream& err) {
  for (const auto& item : items) {
    const auto equals = item.find('=');
    if (equals == std::string::npos || equals == 0) {
      err << "error: --label " << item << " is invalid: allowed KEY=VALUE\n";
      return false;
    }
    (*labels)[item.substr(0, equals)] = item.substr(equals + 1);
  }
  return true;
}

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err) {
  CLI::App app{"posbias: transformer position-bias theory from a posbias server"};
  app.set_version_flag("--version", std::string("posbias ") + POSBIAS_VERSION);
  app.require_subcommand(1);  // Before the subcommands are added: they inherit its maximum.
  app.fallthrough();
  SharedOptions options;
  AddSharedOptions(app, options);
  const CommandRun run = AddCommands(app, kCommands);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& error) {
    return app.exit(error, out, err) == 0 ? 0 : kExitUsage;
  }
  Client client(MakeClientOptions(options));
  if (!client.status().ok()) {  // An unreadable --ca-file, a --cert-file without its key, ...
    err << "error: " << client.status().message() << "\n";
    return kExitUsage;
  }
  if (auto warning = PlaintextTokenWarning(options.server, options.security)) {
    err << *warning << "\n";
  }
  Format format = Format::kTable;
  ParseFormat(options.format, &format);
  const bool err_is_terminal = &err == &std::cerr && isatty(STDERR_FILENO) == 1;
  return run(CliContext{client, format, options.plot, out, err, options.server, err_is_terminal});
}

}  // namespace posbias::cli
