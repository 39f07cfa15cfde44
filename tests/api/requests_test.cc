// The job and model services' handlers as plain functions (declared in the generated
// v1_handlers.h), called directly: a real SQLite store and catalog, callers of two
// tenants and an admin, no gRPC.
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/jobs/job_store.h"
#include "server/models/config.h"
#include "server/registry/model_catalog.h"
#include "server/api/job_requests.h"
#include "server/api/model_requests.h"
#include "server/status/error.h"
#include "tests/api/handler_fixtures.h"

namespace posbias::api {
namespace {
namespace fs = std::filesystem;

// Builds nothing: the catalog's registrations succeed with the config's facts.
class FactsOnlyLoader final : public registry::ModelLoader {
 public:
  absl::StatusOr<registry::LoadedModel> Load(const registry::LoadRequest& request, const registry::Cancelled&) override {
    return registry::LoadedModel{request.config, static_cast<int64_t>(models::EstimatedParameters(request.config)),
                                 "not built (test)", ""};
  }
  absl::Status Export(const registry::LoadRequest&, const std::string&, const registry::Cancelled&) override {
    return absl::UnimplementedError("the test loader exports nothing");
  }
  void Forget(const std::string&) override {}
};

v1::SubmitJobRequest TinyJob(const std::string& request_id = "") {
  v1::SubmitJobRequest request;
  auto* spec = request.mutable_spec()->mutable_jacobian_norm();
  spec->set_model("gpt2-tiny");
  spec->set_sequence_length(8);
  spec->set_samples(1);
  request.set_request_id(request_id);
  return request;
}

class RequestsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = FreshTestDirectory("requests_test");
    store_ = *jobs::OpenSqliteJobStore((base_ / "jobs.sqlite").string());
    catalog_ = *registry::ModelCatalog::Open({(base_ / "root").string(), base_.string()}, &loader_);
    jobs_ = std::make_unique<JobRequests>(store_.get(), catalog_.get(), nullptr, admission::JobLimits{}, nullptr, nullptr);
    ModelRequests::Jobs on_jobs;
    on_jobs.active = [this](const registry::ModelEntry&, const std::optional<std::string>&) { return active_; };
    on_jobs.cancel = [](const registry::ModelEntry&) { return std::vector<std::string>{"job-1", "job-2"}; };
    models_ = std::make_unique<ModelRequests>(catalog_.get(), on_jobs);
  }
  void TearDown() override { fs::remove_all(base_); }

  fs::path base_;
  FactsOnlyLoader loader_;
  std::unique_ptr<jobs::JobStore> store_;
  std::unique_ptr<registry::ModelCatalog> catalog_;
  std::unique_ptr<JobRequests> jobs_;
  std::unique_ptr<ModelRequests> models_;
  int64_t active_ = 0;
  Caller lab_a_ = CallerOf("lab-a"), lab_b_ = CallerOf("lab-b"), admin_ = CallerOf("ops", auth::Role::kAdmin);
};

TEST_F(RequestsTest, ASubmittedJobIsItsTenantsAndAnotherTenantCannotTellItExists) {
  auto job = HandleSubmitJob(*jobs_, lab_a_, TinyJob());
  ASSERT_TRUE(job.ok()) << job.status();
  EXPECT_EQ(job->state(), v1::JOB_STATE_QUEUED);
  EXPECT_EQ(lab_a_.resource, job->id()) << "the audit line names the job";
  v1::GetJobRequest get;
  get.set_id(job->id());
  auto mine = HandleGetJob(*jobs_, lab_a_, get);
  ASSERT_TRUE(mine.ok()) << mine.status();
  EXPECT_EQ(mine->queue_position(), 0u);
  const auto theirs = HandleGetJob(*jobs_, lab_b_, get);
  EXPECT_EQ(theirs.status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(ErrorReasonOf(theirs.status()), "JOB_NOT_FOUND");
  EXPECT_EQ(HandleListJobs(*jobs_, lab_b_, {})->jobs_size(), 0);
  EXPECT_EQ(HandleListJobs(*jobs_, lab_a_, {})->jobs_size(), 1);
  EXPECT_EQ(HandleListJobs(*jobs_, admin_, {})->jobs_size(), 1) << "an admin sees every tenant's jobs";
}

TEST_F(RequestsTest, AnotherTenantsJobLooksExactlyLikeAMissingOne) {
  auto job = HandleSubmitJob(*jobs_, lab_a_, TinyJob());
  ASSERT_TRUE(job.ok());
  v1::GetJobRequest hidden, missing;
  hidden.set_id(job->id());
  missing.set_id(job->id() + "x");
  const std::string seen = std::string(HandleGetJob(*jobs_, lab_b_, hidden).status().message());
  const std::string absent = std::string(HandleGetJob(*jobs_, lab_b_, missing).status().message());
  EXPECT_EQ(seen.substr(0, seen.find(job->id())), absent.substr(0, absent.find(job->id())));
}

TEST_F(RequestsTest, CancellingIsIdempotentAndDeletingNeedsTheJobToBeVisible) {
  auto job = HandleSubmitJob(*jobs_, lab_a_, TinyJob());
  ASSERT_TRUE(job.ok());
  v1::CancelJobRequest cancel;
  cancel.set_id(job->id());
  EXPECT_EQ(HandleCancelJob(*jobs_, lab_b_, cancel).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(HandleCancelJob(*jobs_, lab_a_, cancel)->state(), v1::JOB_STATE_CANCELLED) << "a queued job is cancelled at once";
  EXPECT_EQ(HandleCancelJob(*jobs_, lab_a_, cancel)->state(), v1::JOB_STATE_CANCELLED);
  v1::DeleteJobRequest remove;
  remove.set_id(job->id());
  EXPECT_EQ(HandleDeleteJob(*jobs_, lab_b_, remove).status().code(), absl::StatusCode::kNotFound);
  EXPECT_TRUE(HandleDeleteJob(*jobs_, lab_a_, remove).ok());
  v1::GetJobRequest get;
  get.set_id(job->id());
  EXPECT_EQ(HandleGetJob(*jobs_, lab_a_, get).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(RequestsTest, AResultBeforeTheJobFinishesIsRefusedWithJobNotFinished) {
  auto job = HandleSubmitJob(*jobs_, lab_a_, TinyJob());
  ASSERT_TRUE(job.ok());
  v1::GetJobResultRequest result;
  result.set_id(job->id());
  const auto refused = HandleGetJobResult(*jobs_, lab_a_, result);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "JOB_NOT_FINISHED");
}

TEST_F(RequestsTest, ARetriedRequestIdReturnsTheSameJobAndAnotherBodyIsRefused) {
  auto first = HandleSubmitJob(*jobs_, lab_a_, TinyJob("run-1"));
  ASSERT_TRUE(first.ok()) << first.status();
  auto retried = HandleSubmitJob(*jobs_, lab_a_, TinyJob("run-1"));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->id(), first->id());
  auto other = TinyJob("run-1");
  other.mutable_spec()->mutable_jacobian_norm()->set_sequence_length(9);
  const auto reused = HandleSubmitJob(*jobs_, lab_a_, other);
  EXPECT_EQ(reused.status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(ErrorReasonOf(reused.status()), "REQUEST_ID_REUSED");
  EXPECT_TRUE(HandleSubmitJob(*jobs_, lab_b_, TinyJob("run-1")).ok()) << "request ids are per tenant";
}

TEST_F(RequestsTest, SubmissionsAfterShutdownAndTextInputsWithoutTokenizersAreRefused) {
  auto text = TinyJob();
  text.mutable_spec()->mutable_jacobian_norm()->mutable_input()->mutable_text()->add_samples()->add_documents("hello");
  EXPECT_EQ(HandleSubmitJob(*jobs_, lab_a_, text).status().code(), absl::StatusCode::kUnimplemented);
  jobs_->Shutdown();
  const auto refused = HandleSubmitJob(*jobs_, lab_a_, TinyJob());
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "SHUTTING_DOWN");
}

TEST_F(RequestsTest, AQuotaShowsThePrincipalsLimitsAndItsOwnQueuedAndRunningJobs) {
  lab_a_.principal.max_queued_jobs = 3;
  lab_a_.principal.max_running_jobs = 1;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(HandleSubmitJob(*jobs_, lab_a_, TinyJob()).ok());
  ASSERT_TRUE(HandleSubmitJob(*jobs_, lab_b_, TinyJob()).ok());
  ASSERT_TRUE((*store_->ClaimNext("worker-1", {"cpu"}, "cpu"))->owner == "lab-a-user") << "the oldest job runs";
  auto quota = HandleGetQuota(*jobs_, lab_a_, {});
  ASSERT_TRUE(quota.ok()) << quota.status();
  EXPECT_EQ(quota->principal(), "lab-a-user");
  EXPECT_EQ(quota->tenant(), "lab-a");
  EXPECT_EQ(quota->role(), v1::ACCESS_ROLE_OPERATOR);
  EXPECT_EQ(quota->max_queued_jobs(), 3u);
  EXPECT_EQ(quota->max_running_jobs(), 1u);
  EXPECT_EQ(quota->queued_jobs(), 2u);
  EXPECT_EQ(quota->running_jobs(), 1u);
  Caller colleague = CallerOf("lab-a");
  colleague.principal.name = "lab-a-colleague";
  quota = HandleGetQuota(*jobs_, colleague, {});
  ASSERT_TRUE(quota.ok());
  EXPECT_EQ(quota->queued_jobs() + quota->running_jobs(), 0u) << "quotas count a principal's own jobs";
  EXPECT_EQ(quota->max_queued_jobs(), 0u) << "no quota of its own";
}

TEST_F(RequestsTest, AWatchWritesEachChangeOnceEndsAfterATerminalStateAndWhenTheJobIsNoLongerTheWatchers) {
  auto job = HandleSubmitJob(*jobs_, lab_a_, TinyJob());
  ASSERT_TRUE(job.ok());
  JobWatchState watch(lab_a_.principal, job->id());
  auto first = watch.Look(store_->Get(job->id()));
  ASSERT_TRUE(first.message.has_value()) << "the first look writes the job as it is";
  EXPECT_EQ(first.message->job().state(), v1::JOB_STATE_QUEUED);
  EXPECT_FALSE(first.end.has_value());
  auto same = watch.Look(store_->Get(job->id()));
  EXPECT_FALSE(same.message.has_value() || same.end.has_value()) << "an unchanged job writes nothing";
  EXPECT_FALSE(watch.Look(absl::UnavailableError("store away")).end.has_value()) << "the store away decides nothing";

  v1::CancelJobRequest cancel;
  cancel.set_id(job->id());
  ASSERT_TRUE(HandleCancelJob(*jobs_, lab_a_, cancel).ok());
  auto last = watch.Look(store_->Get(job->id()));
  ASSERT_TRUE(last.message.has_value());
  EXPECT_EQ(last.message->job().state(), v1::JOB_STATE_CANCELLED);
  ASSERT_TRUE(last.end.has_value());
  EXPECT_TRUE(last.end->ok()) << "a terminal state ends the stream OK after its message";

  JobWatchState stranger(lab_b_.principal, job->id());
  auto hidden = stranger.Look(store_->Get(job->id()));
  EXPECT_FALSE(hidden.message.has_value()) << "nothing of another tenant's job is written";
  ASSERT_TRUE(hidden.end.has_value());
  EXPECT_EQ(ErrorReasonOf(*hidden.end), "JOB_NOT_FOUND");
  v1::DeleteJobRequest remove;
  remove.set_id(job->id());
  ASSERT_TRUE(HandleDeleteJob(*jobs_, lab_a_, remove).ok());
  JobWatchState late(lab_a_.principal, job->id());
  auto gone = late.Look(store_->Get(job->id()));
  ASSERT_TRUE(gone.end.has_value());
  EXPECT_EQ(gone.end->code(), absl::StatusCode::kNotFound) << "a deleted job ends the stream";
}

v1::RegisterModelRequest TinyModel(const std::string& name) {
  v1::RegisterModelRequest request;
  request.set_name(name);
  request.mutable_preset()->set_preset("gpt2-tiny");
  return request;
}

TEST_F(RequestsTest, ATenantsModelIsItsOwnWhilePresetsArePublic) {
  auto model = HandleRegisterModel(*models_, lab_a_, TinyModel("mine"));
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->tenant(), "lab-a");
  EXPECT_EQ(lab_a_.resource, "mine");
  v1::GetModelRequest get;
  get.set_name("mine");
  EXPECT_TRUE(HandleGetModel(*models_, lab_a_, get).ok());
  EXPECT_EQ(ErrorReasonOf(HandleGetModel(*models_, lab_b_, get).status()), "MODEL_NOT_FOUND");
  get.set_name("gpt2-tiny");
  EXPECT_TRUE(HandleGetModel(*models_, lab_b_, get).ok()) << "a built-in preset is public";
  auto listed = HandleListModels(*models_, lab_b_, {});
  ASSERT_TRUE(listed.ok());
  for (const auto& m : listed->models()) EXPECT_NE(m.name(), "mine");
  bool found = false;
  auto everyone = HandleListModels(*models_, admin_, {});
  ASSERT_TRUE(everyone.ok());
  for (const auto& m : everyone->models()) found |= m.name() == "mine";
  EXPECT_TRUE(found) << "an admin lists every tenant's models";
}

TEST_F(RequestsTest, DeletingAPublicModelNeedsAnAdminAndForceCancelsItsJobs) {
  ASSERT_TRUE(HandleRegisterModel(*models_, admin_, TinyModel("shared")).ok());
  v1::DeleteModelRequest remove;
  remove.set_name("shared");
  const auto refused = HandleDeleteModel(*models_, lab_a_, remove);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(ErrorReasonOf(refused.status()), "ROLE_REQUIRED");
  active_ = 2;
  EXPECT_EQ(ErrorReasonOf(HandleDeleteModel(*models_, admin_, remove).status()), "MODEL_IN_USE");
  remove.set_force(true);
  auto deleted = HandleDeleteModel(*models_, admin_, remove);
  ASSERT_TRUE(deleted.ok()) << deleted.status();
  EXPECT_EQ(deleted->cancelled_job_ids_size(), 2);
  remove.set_name("gpt2-tiny");
  EXPECT_EQ(ErrorReasonOf(HandleDeleteModel(*models_, admin_, remove).status()), "MODEL_BUILTIN");
}

TEST_F(RequestsTest, PresetsStateTheirSizeAndAModelWithoutATokenizerCannotTokenize) {
  auto presets = HandleListPresets(*models_, lab_a_, {});
  ASSERT_TRUE(presets.ok());
  bool tiny = false;
  for (const auto& preset : presets->presets()) {
    if (preset.name() != "gpt2-tiny") continue;
    tiny = true;
    EXPECT_TRUE(preset.test_preset());
    EXPECT_GT(preset.parameter_count(), 0u);
    EXPECT_EQ(preset.memory_bytes(), 4 * preset.parameter_count());
  }
  EXPECT_TRUE(tiny);
  v1::TokenizeRequest tokenize;
  tokenize.set_model("gpt2-tiny");
  tokenize.set_text("hello");
  EXPECT_EQ(HandleTokenize(*models_, lab_a_, tokenize).status().code(), absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace posbias::api
