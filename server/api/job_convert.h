// Conversions between the public job messages (posbias.v1) and the typed job contract
// (jobs/jacobian_spec.h, jobs/jacobian_report.h): the only place job enums meet proto enums
// (GetJobResult's pages of a report: result_pages.h), and the per-tenant request ids.
#pragma once

#include <cstdint>

#include "absl/status/statusor.h"
#include "posbias/v1/job_service.pb.h"
#include "server/jobs/jacobian_report.h"
#include "server/jobs/job.h"

namespace posbias::api {

// The whole request as a job record to admit, in one step: the spec with its defaults (16
// samples, 64 probes, the given tokens' count as samples), `drawn_seed` unless the input names a
// seed, the compared models (`versus`) and the reference by the names the request gives,
// priority, time limit, labels, request_id, and the queue partition its device preference
// implies. Submission then binds the names to registrations (job_submission.cc). EMPTY_REQUEST
// without a Jacobian-norm spec; INVALID_ARGUMENT for more than kMaxVersusModels compared models or
// a reference that names none of the job's models.
absl::StatusOr<jobs::JobRecord> RecordFromRequest(const v1::SubmitJobRequest& request, uint64_t drawn_seed);

// Whether the request names the input's seed (else the server draws one).
bool RequestNamesSeed(const v1::SubmitJobRequest& request);

// Whether the admitted `requested` job is the job `existing` (made with the same request_id): the
// same spec, priority, time limit, labels and device preference; unless the request named its
// seed, the seed drawn for `existing` counts as the request's.
bool RequestMatchesJob(jobs::JobRecord requested, bool names_seed, const jobs::JobRecord& existing);

// Job record -> public Job message.
void JobToProto(const jobs::JobRecord& job, v1::Job* out);

// A text input's spike at a document start, as the result reports it.
void SpikeToProto(const jobs::BoundarySpike& spike, v1::BoundarySpike* out);
// A recall table and a correlation as the result messages say.
void RecallToProto(const jobs::RecallSummary& summary, v1::RecallSummary* out);
void CorrelationToProto(const jobs::RecallCorrelation& correlation, v1::RecallCorrelation* out);

// request_id is per principal: the store keeps one unique key per request_id, so a principal's
// key is "<tenant>/<principal>/<request_id>". The key names the submitter, not the job's tenant
// (an admin's job on a tenant's model is that tenant's), so a request_id never meets a job its
// caller did not submit. A request_id has no '/', so the client's id is the key's last part (keys
// stored before, "<tenant>/<request_id>" or the id alone, read back the same way).
std::string PrincipalRequestKey(const std::string& tenant, const std::string& principal, const std::string& request_id);
// The client's request_id of a stored key.
std::string ClientRequestId(const std::string& stored_key);

}  // namespace posbias::api
