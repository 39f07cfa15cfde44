// GetJobResult's pages (api/job_convert FillResultPage) stay within the result-page limit that
// job_service.proto promises: fewer positions when the page would be larger, every position once
// across the pages, and a refusal naming what to narrow when one position alone is too large.
#include <set>
#include <vector>

#include "gtest/gtest.h"
#include "server/limits/limits.h"
#include "server/api/job_convert.h"
#include "server/api/result_pages.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

// A finished job with `samples` raw samples kept at each of `length` positions.
jobs::JacobianReport ReportWithRawSamples(int length, int samples) {
  jobs::JacobianReport report;
  report.model.layers = 2;
  report.measurement.length = report.measurement.target = length;
  report.measurement.samples = samples;
  std::vector<double> column;
  for (int j = 1; j <= length; ++j) column.push_back(1.0 / j);
  for (int j = 1; j <= length; ++j) report.positions.push_back(j);
  report.sq_norm_mean = report.sq_norm_std = report.sq_norm_stderr = column;
  report.norm_mean = report.norm_std = report.norm_stderr = column;
  report.raw = std::vector<std::vector<double>>(samples, column);
  return report;
}

const size_t kPageBytes = limits::Default<size_t>(limits::Limit::kMaxResultPageBytes);

TEST(ResultPages, APageThatWouldPassTheLimitHoldsFewerPositionsAndThePagesCoverEveryPositionOnce) {
  const auto report = ReportWithRawSamples(128, 8192);  // 64 KiB of raw values per position: 8 MiB in all.
  v1::GetJobResultRequest request;
  request.set_id("job");
  request.set_include_raw_samples(true);
  std::set<uint32_t> seen;
  int pages = 0;
  do {
    v1::GetJobResultResponse response;
    const absl::Status status = FillResultPage(request, report, &response);
    ASSERT_TRUE(status.ok()) << status;
    EXPECT_LE(response.ByteSizeLong(), kPageBytes);
    EXPECT_LT(response.jacobian_norm().positions_size(), 128) << "not the 1024 asked for by default";
    for (uint32_t position : response.jacobian_norm().positions()) EXPECT_TRUE(seen.insert(position).second);
    ASSERT_EQ(response.jacobian_norm().raw_samples_size(), 8192);
    EXPECT_EQ(response.jacobian_norm().raw_samples(0).sq_norm_size(), response.jacobian_norm().positions_size());
    request.set_page_token(response.next_page_token());
    ++pages;
  } while (!request.page_token().empty() && pages < 100);
  EXPECT_EQ(seen.size(), 128u);
  EXPECT_GE(pages, 2);
}

TEST(ResultPages, OnePositionLargerThanTheLimitIsRefusedNamingWhatToNarrow) {
  const auto report = ReportWithRawSamples(2, 600000);  // 4.8 MB of raw values per position.
  v1::GetJobResultRequest request;
  request.set_id("job");
  request.set_include_raw_samples(true);
  v1::GetJobResultResponse response;
  const absl::Status status = FillResultPage(request, report, &response);
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReasonOf(status), "REQUEST_TOO_LARGE");
  EXPECT_NE(ErrorAllowedOf(status).find("sample_count"), std::string::npos) << status;
  EXPECT_EQ(response.ByteSizeLong(), 0u) << "nothing half-filled";
  request.set_sample_count(1000);
  EXPECT_TRUE(FillResultPage(request, report, &response).ok()) << "fewer samples fit";
  EXPECT_EQ(response.jacobian_norm().positions_size(), 2);
}

}  // namespace
}  // namespace posbias::api
