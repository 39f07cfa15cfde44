// Recall inputs of jobs (JacobianInput.recall in job_service.proto): the recall room's probes
// (recall/recall_task.h), tokenized with the model's tokenizer, depth-major: probe i asks at depth
// depths[i / probes_per_depth] and is drawn from recall::ProbeSeed(seed, i). The job then runs on
// the ids like given tokens (L + 1 each: the answer follows position L), and the result answers
// per depth (statistics/recall_sweep.h).
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "posbias/v1/job_service.pb.h"
#include "server/jobs/jacobian_spec.h"
#include "server/limits/limits.h"
#include "server/registry/model_entry.h"
#include "server/text/text_input.h"
#include "server/tokenizer/tokenizer.h"

namespace posbias::text {

inline constexpr int kMaxRecallDepths = 64;

// INVALID_ARGUMENT naming the field: no depths or more than 64, a depth outside [0, 1], no probes,
// more samples than `max_samples`, options the generator refuses (recall::CheckTaskOptions), a
// target other than L (INVALID_POSITION), the loss gradient, a context too short for the pairs,
// or values the tokenizer does not give one token each.
absl::StatusOr<LaidOutText> LayOutRecall(const tokenizer::Tokenizer& tokenizer, const v1::RecallInput& input,
                                         const jobs::JacobianJobSpec& spec,
                                         int64_t max_samples = limits::Default<int64_t>(limits::Limit::kMaxSamples));

// Whether a recall input asks token-id probes of `model`: it sets token_ids, or sets neither
// token_ids nor text and the model was trained on a recall task (ModelEntry::trained_recall).
bool AsksTokenIds(const v1::RecallInput& input, const registry::ModelEntry& model);

// Token-id probes (recall/mqar.h), no tokenizer needed: the request's ranges (unset ones: the
// defaults 128:192, 192:256, 32:127) and pairs (0 = 8), or, when the request sets no token_ids,
// `model`'s trained task's ranges and pairs (the sweep says so: RecallSweep::trained_task_of).
// Probe i asks at depths[i / probes_per_depth] and is drawn from recall::ProbeSeed(seed, i).
// INVALID_ARGUMENT naming the field: as LayOutRecall's checks, token_ids with text, key_letters
// or values with token ids, ranges outside the model's vocabulary or overlapping, more pairs than
// keys or than a probe has room for.
absl::StatusOr<LaidOutText> LayOutTokenIdRecall(const v1::RecallInput& input, const registry::ModelEntry& model,
                                                const jobs::JacobianJobSpec& spec,
                                                int64_t max_samples = limits::Default<int64_t>(limits::Limit::kMaxSamples));

}  // namespace posbias::text
