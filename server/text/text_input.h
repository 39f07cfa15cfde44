// Text inputs of jobs: documents tokenized with the model's tokenizer and laid out into exactly
// L ids per sample (JacobianInput.text in job_service.proto): CONCATENATE (documents joined by a
// separator, the model's end-of-sequence token by default), FIXED_BOUNDARIES (documents cut or
// filled so that they begin at given positions: the paper's chunking experiment) and NEEDLE (a
// needle text at depth fractions inside filler documents: lost-in-the-middle sweeps). The job then
// runs on the ids like given tokens; where each document (or the needle) begins is kept with it.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "posbias/v1/job_service.pb.h"
#include "server/jobs/jacobian_spec.h"
#include "server/limits/limits.h"
#include "server/tokenizer/tokenizer.h"

namespace posbias::text {

struct LaidOutText {
  // [sample][position]: L ids each, L + 1 with the next token (the id after position L in the text).
  std::vector<std::vector<int64_t>> tokens;
  // [sample], 1-based: where each document begins, and where a short document repeated to fill
  // its span (FIXED_BOUNDARIES) begins again.
  std::vector<std::vector<int64_t>> document_starts;
  // NEEDLE: the sweep's layout (depths, the needle's start at each, and which sample is which).
  std::optional<jobs::JacobianJobSpec::NeedleSweep> needle_sweep;
  // RECALL inputs (recall_input.h): the probes' layout.
  std::optional<jobs::JacobianJobSpec::RecallSweep> recall;
};

struct TextLimits {
  int max_samples = limits::Default<int>(limits::Limit::kMaxTextSamples);
  int max_documents = limits::Default<int>(limits::Limit::kMaxTextDocuments);  // Per sample.
  size_t max_document_bytes = limits::Default<size_t>(limits::Limit::kMaxDocumentBytes);
  size_t max_total_bytes = limits::Default<size_t>(limits::Limit::kMaxTextBytes);
};

// INVALID_ARGUMENT naming the field for a layout that cannot give L tokens (too few tokens, more
// without `truncate`, boundaries out of order, depths outside [0, 1], an empty document to fill);
// RESOURCE_EXHAUSTED / REQUEST_TOO_LARGE beyond the limits, checked before anything is tokenized.
// `with_next_token`: LOG_PROB at T = L scores the token after position L, so each sample also gets
// the id that follows its L ids in the text (CONCATENATE: L + 1 tokens are needed; FIXED_BOUNDARIES:
// the last document runs one token further; NEEDLE: the haystack does). Document starts stay in 1..L.
absl::StatusOr<LaidOutText> LayOutText(const tokenizer::Tokenizer& tokenizer, const v1::TextInput& input,
                                       int64_t length, bool with_next_token = false, const TextLimits& limits = {});

}  // namespace posbias::text
