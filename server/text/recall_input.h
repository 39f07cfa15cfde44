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

}  // namespace posbias::text
