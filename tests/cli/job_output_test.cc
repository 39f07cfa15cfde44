// How the CLI shows a job (client/cli/job_watch.h) and names what a result measured
// (client/cli/job_result_output.h), without a server.
#include <gtest/gtest.h>

#include <string>

#include "client/cli/job_result_output.h"
#include "client/cli/job_watch.h"

namespace posbias::cli {
namespace {

v1::Job RunningJob() {
  v1::Job job;
  job.set_id("j-1");
  job.set_state(v1::JOB_STATE_RUNNING);
  auto* spec = job.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("gpt2");
  spec->set_method(v1::JACOBIAN_METHOD_HUTCHINSON);
  spec->set_probes(8);
  return job;
}

TEST(JobJson, NamesStatesAndEnumsInLowerCaseAsTheFlagsSpellThem) {
  const auto json = JobJson(RunningJob());
  EXPECT_EQ(json["id"], "j-1");
  EXPECT_EQ(json["state"], "running");
  EXPECT_EQ(json["method"], "hutchinson");
  EXPECT_EQ(json["probes"], 8);
  EXPECT_EQ(json["model"], "gpt2");
}

TEST(JobJson, ShowsThePathwayAndTheErrorOnlyWhenTheJobHasThem) {
  v1::Job job = RunningJob();
  EXPECT_FALSE(JobJson(job).contains("pathway")) << "the full pathway is the default";
  EXPECT_FALSE(JobJson(job).contains("error"));
  job.mutable_spec()->mutable_jacobian_norm()->set_pathway(v1::JACOBIAN_PATHWAY_VALUE_ONLY);
  job.set_state(v1::JOB_STATE_FAILED);
  job.mutable_error()->set_message("the model is gone");
  const auto json = JobJson(job);
  EXPECT_EQ(json["pathway"], "value_only");
  EXPECT_EQ(json["state"], "failed");
  EXPECT_EQ(json["error"]["message"], "the model is gone");
}

TEST(Measured, NamesTheWeightsTheReportGivesOrElseTheJob) {
  v1::GetJobResultResponse whole;
  whole.set_id("j-2");
  whole.set_report_json(R"json({"model": {"weights": "gpt2 (seed 0)"}})json");
  EXPECT_EQ(Measured(whole), "gpt2 (seed 0) (job j-2)");
  whole.set_report_json(R"json({"model": {"weights": 7}})json");
  EXPECT_EQ(Measured(whole), "job j-2");
  whole.set_report_json("not json");
  EXPECT_EQ(Measured(whole), "job j-2");
}

}  // namespace
}  // namespace posbias::cli
