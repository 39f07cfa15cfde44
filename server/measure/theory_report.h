// The report of posbias-measure and of every job (jobs/jacobian_report.h): the measurement with its provenance, and the comparison with
// the density room's theory (fitted alpha for the coherent and incoherent models at the model's
// depth, and the theory under the measured per-layer branch ratios alpha_l).
#pragma once

#include "server/jacobian/engine.h"
#include "server/jobs/jacobian_report.h"
#include "server/models/model.h"

namespace posbias::measure {

// A measured squared-norm profile (positions 1..t) against the theory: the fits at `depth` (the
// model's layers; 0 = unknown, then depth 1) with bootstrap intervals over `samples`, the
// effective-depth ridge, and the theory under the measured per-layer `branch_ratio` (when given);
// `layer_windows`: each layer's attention window (0 = full causal; empty = full everywhere). One
// window shared by every layer is the routing matrix of every part; windows that differ between
// layers (Gemma 2/3, Qwen3, SmolLM3) enter the theory under the measured branch ratios exactly
// (the layers' product, in order), while the fits, whose powers of one matrix cannot hold them,
// use full causal attention and the note says so. A part that fails is left out and the note says
// which and why.
jobs::TheoryComparison CompareWithTheory(int64_t depth, const std::vector<double>& measured,
                                         const std::vector<double>& branch_ratio,
                                         const std::vector<std::vector<double>>& samples,
                                         const std::vector<uint32_t>& layer_windows);

// The loss gradient's theory part: no fit, and a note with the routing model's counterpart (not
// a row of N^H, so the row fits do not apply).
jobs::TheoryComparison LossGradientTheory(int64_t depth);

// `weights` names where the parameters came from: a checkpoint path, or "" for the seeded init.
jobs::JacobianReport BuildReport(models::DecoderModel& model, const jacobian::MeasureOptions& options,
                                 const jacobian::MeasureResult& result, const std::string& weights);

}  // namespace posbias::measure
