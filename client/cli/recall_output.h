// Recall jobs in the CLI: the recall tables of `posbias jobs result` (per model, accuracy by depth
// with its interval, the answer's log-probability and the queried pair's Jacobian share) and the
// two plots beside --plot: <plot>-recall.svg (accuracy by depth per model, with the 95 % interval
// drawn as its two edges and chance as a dashed line) and <plot>-recall-scatter.svg (mechanism
// against behaviour: each depth's pair share of the context against its accuracy, per model).
#pragma once

#include <ostream>
#include <string>

#include "posbias/v1/job_service.pb.h"

namespace posbias::cli {

// Nothing for a result without recall.
void PrintRecall(std::ostream& out, const v1::JacobianNormResult& result);

// Writes the two plots beside `plot` (its path without ".svg", then "-recall.svg" and
// "-recall-scatter.svg"); "" when written (or nothing to draw), else what failed.
std::string PlotRecall(const std::string& plot, const std::string& measured, const v1::JacobianNormResult& result,
                       std::ostream& notes);

}  // namespace posbias::cli
