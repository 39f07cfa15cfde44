// Scratch files in the uploads directory: uploads being staged, exports being streamed, weights
// being hashed. Each name says which process made it, so a process that starts can remove what a
// dead one left behind (kill -9, power loss) without touching the files of live replicas that
// share the directory.
//
// Name: .<kind>-<model>~<host>~<pid>~<process token>[suffix]. A file is stale when it was made on
// this host by a process that is gone: its pid is not running, or it is this process's own pid
// with another token (a restarted container often gets the same pid). Files of other hosts, and
// scratch files of an older naming, are stale once untouched for `max_age` (an upload writes at
// least every --upload-idle-seconds, so only dead ones age).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>

namespace posbias::registry {

// A fresh scratch path in `dir` for `kind` ("staging", "export", "hash") of model `model`.
std::string ScratchPath(const std::string& dir, std::string_view kind, std::string_view model);

struct ScratchSweep {
  int64_t files_removed = 0;
  uint64_t bytes_removed = 0;
};

// Removes the stale scratch files of `dir` (see above); never a file of a live process.
ScratchSweep RemoveStaleScratch(const std::string& dir, std::chrono::seconds max_age);

}  // namespace posbias::registry
