// Reads a measured per-position profile (values for positions 1..L) from a file or stdin ("-").
//
// Accepted forms:
//  - JSON: an array of numbers; or an object with one of the arrays "values", "profile",
//    "sq_norm_mean" (posbias-measure's output) or the key given as `column`.
//  - CSV / whitespace-separated text: one value per line, or several columns where `column` names
//    the one to use (by header name or 1-based index; default: the last column). Lines starting
//    with '#' and a non-numeric header line are skipped.
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace posbias::cli {

absl::StatusOr<std::vector<double>> ReadProfile(const std::string& path, const std::string& column);

// Parses text (the file's contents) as above; `source` names it in errors.
absl::StatusOr<std::vector<double>> ParseProfile(const std::string& text, const std::string& column,
                                                 const std::string& source);

}  // namespace posbias::cli
