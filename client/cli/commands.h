// The posbias CLI: subcommands health, density, discrete, summarize, fit.
//
// Exit codes: 0 success; 1 the server answered with an error (printed as
// "error: <CODE> [<REASON>] <message>") or could not be reached; 2 bad usage or unreadable input.
#pragma once

#include <ostream>

namespace posbias::cli {

int RunCli(int argc, const char* const* argv, std::ostream& out, std::ostream& err);

}  // namespace posbias::cli
