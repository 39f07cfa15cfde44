// The posbias CLI: its entry point, the options every subcommand shares (--server, --format,
// --plot, --timeout, and the security options of security_options.h), the context a subcommand runs with, and the table its subcommands are
// registered from. The subcommands live by concern: health, density, discrete, summarize and fit in
// density_commands.h, `models ...` in model_commands.h, `jobs ...` in job_commands.h.
//
// Exit codes: 0 success; 1 the server answered with an error (printed as
// "error: <CODE> [<REASON>] <message>") or could not be reached, a server that is not serving
// (health), a job that failed (jobs submit --wait); 2 bad usage, unreadable input or an output
// file (--plot, models export) that cannot be written.
#pragma once

#include <functional>
#include <memory>
#include <ostream>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "client/cli/output.h"
#include "posbias/client.h"

namespace posbias::cli {

inline constexpr int kExitServerError = 1;
inline constexpr int kExitUsage = 2;

// What a subcommand runs with, built from the shared options once the command line is parsed.
struct CliContext {
  Client& client;    // --server and --timeout
  Format format;     // --format
  std::string plot;  // --plot: SVG path, "" = none
  std::ostream& out;
  std::ostream& err;
  std::string server;  // --server, for hints.
  // Whether `err` is a terminal: progress is redrawn in place there ("\r"), and written as one
  // line per change elsewhere (a log file, a CI console, a pipe).
  bool err_is_terminal = false;

  // Prints "error: <CODE> [<REASON>] <message>" for a failed call (and, for a server out of
  // reach, a line saying how to start or name one); returns kExitServerError.
  int Fail(const absl::Status& status) const;
  // Prints "error: <message>"; returns kExitUsage.
  int UsageError(absl::string_view message) const;
  // After a Delete* call: "deleted <what> <name>" on err and 0, or Fail(status).
  int ReportDeleted(const absl::Status& status, absl::string_view what,
                    absl::string_view name) const;
};

// A subcommand's run step, holding the flag values its definition registered.
using CommandRun = std::function<int(const CliContext&)>;

// One row of a command table: `define` adds the subcommand's flags (or its own subcommands) to
// `command`, the CLI::App made for the row, and returns the step that runs it.
struct CommandSpec {
  const char* name;
  const char* help;
  CommandRun (*define)(CLI::App& command);
};

// Adds one subcommand of `parent` per row, in order (--help lists them so), and makes `parent`
// require exactly one; the returned step runs the one the command line chose.
CommandRun AddCommands(CLI::App& parent, std::span<const CommandSpec> table);

// The run step of a subcommand whose definition stored its flag values in `flags`.
template <class Flags>
CommandRun RunWith(std::shared_ptr<Flags> flags, int (*run)(const CliContext&, const Flags&)) {
  return
      [flags = std::move(flags), run](const CliContext& context) { return run(context, *flags); };
}

// Every page of a List* call: calls `fetch` with the request, then `append` with the page, and
// again with the page's next_page_token until it is empty; the first failed call's status.
template <class Request, class Fetch, class Append>
absl::Status FetchAllPages(Request request, const Fetch& fetch, const Append& append) {
  do {
    auto page = fetch(request);
    if (!page.ok()) return page.status();
    append(*page);
    request.set_page_token(page->next_page_token());
  } while (!request.page_token().empty());
  return absl::OkStatus();
}

// --label KEY=VALUE items into `labels`; false (with a message on err) when one is malformed.
bool ParseLabels(const std::vector<std::string>& items,
                 google::protobuf::Map<std::string, std::string>* labels, std::ostream& err);

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace posbias::cli
