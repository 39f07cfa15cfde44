// The report of posbias-measure and of every job (jobs/jacobian_report.h): the measurement with its provenance, and the comparison with
// the density room's theory (fitted alpha for the coherent and incoherent models at the model's
// depth, and the theory under the measured per-layer branch ratios alpha_l).
#pragma once

#include "server/jacobian/engine.h"
#include "server/jobs/jacobian_report.h"
#include "server/models/model.h"

namespace posbias::measure {

// `weights` names where the parameters came from: a checkpoint path, or "" for the seeded init.
jobs::JacobianReport BuildReport(models::DecoderModel& model, const jacobian::MeasureOptions& options,
                                 const jacobian::MeasureResult& result, const std::string& weights);

}  // namespace posbias::measure
