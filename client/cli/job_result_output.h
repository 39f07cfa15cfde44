// A finished job's result as `posbias jobs result` shows it: the whole typed result joined from its
// pages, the profile and comparison tables, and the plots (--plot FILE.svg and the files beside it).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "client/cli/cli.h"

namespace posbias::cli {

// Every page of GetJobResult joined (positions, the measured statistics and the theory curves'
// profiles); the first page's other members as they came.
absl::StatusOr<v1::GetJobResultResponse> WholeResult(const CliContext& context, const std::string& id);
// The profile's table: position, measured mean and standard error, the fitted theory.
void PrintResultTable(const CliContext& context, const v1::JacobianNormResult& result);
// A comparison job's bands and paired log ratios per model (nothing for other jobs).
void PrintComparison(const CliContext& context, const v1::JacobianNormResult& result);
// What was measured, as the plots' titles name it.
std::string Measured(const v1::GetJobResultResponse& whole);
// Draws the result to context.plot (and the comparison, needle and recall plots beside it).
int PlotResult(const CliContext& context, const std::string& measured, const v1::JacobianNormResult& result);

}  // namespace posbias::cli
