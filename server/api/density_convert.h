// Conversions between posbias.v1 density messages and the density room's types. Every function
// that reads a request validates it and names the offending field in its error.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "posbias/v1/density_service.pb.h"
#include "server/density/fit.h"
#include "server/density/routing.h"
#include "server/density/summary.h"

namespace posbias::api {

absl::StatusOr<density::Routing> RoutingFromProto(const v1::RoutingModel& model);

// Options from the request (defaults when absent), checked against `length` (0 = continuum).
absl::StatusOr<density::SummaryOptions> SummaryOptionsFromProto(const v1::SummaryOptions& options,
                                                                uint64_t length);

void SummaryToProto(const density::ProfileSummary& summary, v1::ProfileSummary* out);

// Which profiles to compute: an empty list means both; unknown values are an INVALID_ARGUMENT.
absl::StatusOr<std::vector<density::Model>> ModelsFromProto(
    const google::protobuf::RepeatedField<int>& models, const std::string& field);

absl::StatusOr<density::FitOptions> FitOptionsFromProto(const v1::FitProfileRequest& request);

// One conversion of the comparison metrics, for FitProfile and for a job's theory alike.
void FitMetricsToProto(const density::ComparisonMetrics& metrics, v1::FitMetrics* out);
void ModelFitToProto(const density::ModelFit& fit, v1::ModelFit* out);

}  // namespace posbias::api
