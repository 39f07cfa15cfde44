// GetJobResult's pages: a finished job's report as pages of selected positions, each within the
// result-page limit (limits.h), with page tokens bound to the selection.
#pragma once

#include <cstddef>

#include "absl/status/status.h"
#include "posbias/v1/job_service.pb.h"
#include "server/jobs/jacobian_report.h"

namespace posbias::api {

// Fills one page of a finished job's result: positions first..last (1-based) every `stride`,
// `page_size` of them per page (default 1024, at most 16384), with the theory comparison, layer
// profiles, branch ratios, raw samples and token ids as asked. The page token is the index of the
// page's first selected position. A page holds fewer positions when it would pass the result-page
// limit (limits.h) together with `reserved_bytes` (what the caller adds to it: the first page's
// report_json); one position alone over the limit is REQUEST_TOO_LARGE. A report larger than the
// limit still goes out whole on the first page, with one position.
absl::Status FillResultPage(const v1::GetJobResultRequest& request, const jobs::JacobianReport& report,
                            v1::GetJobResultResponse* response, size_t reserved_bytes = 0);

}  // namespace posbias::api
