// posbias: the command-line client. See cli.h for subcommands and exit codes.
#include <iostream>

#include "client/cli/cli.h"

int main(int argc, char** argv) { return posbias::cli::RunCli(argc, argv, std::cout, std::cerr); }
