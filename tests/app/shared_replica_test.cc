// One client must never take the service down: a real server on a loopback port with few call
// threads, called by many clients at once through the real client library. Open WatchJob streams
// hold no thread, bursts queue instead of being refused, a full queue or stream cap is refused with
// SERVER_BUSY, CancelJob gets through, and an upload that goes quiet is ended.
#include "server/app/replica.h"

#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "posbias/client.h"
#include "posbias/v1/model_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/models/config.h"
#include "tests/support/eventually.h"

namespace posbias::app {
namespace {

using namespace std::chrono_literals;

class SharedReplicaTest : public ::testing::Test {
 protected:
  // A server whose jobs stay QUEUED (no CPU worker): watches stay open as long as a test wants.
  void StartServer(Replica::Options options) {
    options.listen_address = "127.0.0.1:0";
    options.cpu_worker = false;
    data_dir_ = std::filesystem::temp_directory_path() /
                ("posbias_shared_" + std::to_string(::getpid()) + "_" +
                 ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(data_dir_);
    options.data_dir = data_dir_.string();
    metrics_ = std::make_unique<metrics::Metrics>(metrics::BuildInfo{"test", "grpc", "protobuf"});
    server_ = std::make_unique<Replica>(options, metrics_.get());
    ASSERT_TRUE(server_->Start().ok());
    client_ = std::make_unique<Client>(ClientOptions{.target = Target()});
  }
  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::milliseconds(200));
    server_.reset();
    std::filesystem::remove_all(data_dir_);
  }
  std::string Target() const { return "127.0.0.1:" + std::to_string(server_->port()); }

  std::string QueuedJob() {
    v1::SubmitJobRequest submit;
    submit.mutable_spec()->mutable_jacobian_norm()->set_model("cesaro");
    submit.mutable_spec()->mutable_jacobian_norm()->set_sequence_length(4);
    auto job = client_->SubmitJob(submit);
    EXPECT_TRUE(job.ok()) << job.status();
    return job.ok() ? job->id() : "";
  }

  // Opens `count` watches of `id` on threads of their own; returns once each got its first message.
  void OpenWatches(const std::string& id, int count) {
    for (int i = 0; i < count; ++i) {
      watchers_.emplace_back([this, id] {
        v1::WatchJobRequest watch;
        watch.set_id(id);
        Client own(ClientOptions{.target = Target()});
        bool first = true;
        const absl::Status status = own.WatchJob(watch, [&](const v1::WatchJobResponse& message) {
          if (first) ++first_messages_;
          first = false;
          last_state_ = message.job().state();
          return true;
        });
        if (status.ok()) ++watches_ok_;
      });
    }
    ASSERT_TRUE(test_support::Eventually([&] { return first_messages_ >= count; }, 20s))
        << "every watch gets the job as it is (" << first_messages_ << " of " << count << " within 20 s)";
  }
  void JoinWatches() {
    for (auto& thread : watchers_) thread.join();
    watchers_.clear();
  }

  std::filesystem::path data_dir_;
  std::unique_ptr<metrics::Metrics> metrics_;
  std::unique_ptr<Replica> server_;
  std::unique_ptr<Client> client_;
  std::vector<std::thread> watchers_;
  std::atomic<int> first_messages_{0}, watches_ok_{0};
  std::atomic<int> last_state_{0};
};

TEST_F(SharedReplicaTest, ManyOpenWatchStreamsLeaveEveryOtherCallAnswered) {
  Replica::Options options;
  options.max_rpc_threads = 2;  // Fewer threads than open streams by far.
  StartServer(options);
  const std::string id = QueuedJob();
  OpenWatches(id, 40);
  v1::EvaluateContinuumRequest density;
  density.mutable_model()->set_depth(4);
  density.mutable_model()->set_alpha(0.5);
  density.mutable_point_list()->add_x(0.5);
  EXPECT_TRUE(client_->EvaluateContinuum(density, {.timeout = 5s}).ok());
  v1::GetJobRequest get;
  get.set_id(id);
  EXPECT_TRUE(client_->GetJob(get, {.timeout = 5s}).ok());
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  auto cancelled = client_->CancelJob(cancel, {.timeout = 5s});
  ASSERT_TRUE(cancelled.ok()) << cancelled.status();
  EXPECT_EQ(cancelled->state(), v1::JOB_STATE_CANCELLED);
  JoinWatches();  // Each watch ends after writing the terminal state.
  EXPECT_EQ(watches_ok_.load(), 40);
  EXPECT_EQ(last_state_.load(), v1::JOB_STATE_CANCELLED);
}

TEST_F(SharedReplicaTest, AWatchBeyondTheCapIsRefusedAsServerBusy) {
  Replica::Options options;
  options.max_watch_streams = 3;
  options.tenant_share = 1.0;  // One tenant: the server-wide cap is what is tried here, not a share.
  StartServer(options);
  const std::string id = QueuedJob();
  OpenWatches(id, 3);
  v1::WatchJobRequest watch;
  watch.set_id(id);
  const absl::Status refused = client_->WatchJob(watch, [](const v1::WatchJobResponse&) { return true; }, {.timeout = 5s});
  EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrorReason(refused), "SERVER_BUSY");
  v1::CancelJobRequest cancel;
  cancel.set_id(id);
  ASSERT_TRUE(client_->CancelJob(cancel).ok());
  JoinWatches();
}

v1::EvaluateDiscreteRequest SlowDiscrete(uint64_t length) {
  v1::EvaluateDiscreteRequest request;
  request.mutable_model()->set_depth(64);
  request.mutable_model()->set_alpha(0.5);
  request.set_length(length);
  request.set_summaries_only(true);
  return request;
}

// Runs `calls_each` calls on each of `threads` client threads at once; counts OK and SERVER_BUSY.
std::pair<int, int> Burst(const std::string& target, int threads, int calls_each, uint64_t length) {
  std::atomic<int> ok{0}, busy{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < threads; ++t) {
    clients.emplace_back([&] {
      Client client(ClientOptions{.target = target});
      for (int i = 0; i < calls_each; ++i) {
        auto answer = client.EvaluateDiscrete(SlowDiscrete(length));
        if (answer.ok()) ++ok;
        if (ErrorReason(answer.status()) == "SERVER_BUSY") ++busy;
      }
    });
  }
  for (auto& thread : clients) thread.join();
  return {ok.load(), busy.load()};
}

TEST_F(SharedReplicaTest, ABurstOfCallsQueuesInsteadOfBeingRefused) {
  Replica::Options options;
  options.max_rpc_threads = 2;
  StartServer(options);
  const auto [ok, busy] = Burst(Target(), 48, 5, 20'000);
  EXPECT_EQ(ok, 48 * 5);
  EXPECT_EQ(busy, 0);
}

TEST_F(SharedReplicaTest, AFullQueueRefusesWithServerBusyAndTheRestAreAnswered) {
  Replica::Options options;
  options.max_rpc_threads = 1;
  options.max_waiting_calls = 1;
  StartServer(options);
  const auto [ok, busy] = Burst(Target(), 16, 2, 2'000'000);
  EXPECT_GT(busy, 0) << "one thread, one waiting call: a burst of 16 must overflow";
  EXPECT_EQ(ok + busy, 32) << "every other call is answered";
}

TEST_F(SharedReplicaTest, AnUploadThatGoesQuietIsEndedAndLeavesNoFile) {
  Replica::Options options;
  options.upload_idle_seconds = 1;
  StartServer(options);
  auto stub = v1::ModelService::NewStub(client_->channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 20s);
  v1::Model model;
  auto writer = stub->UploadModel(&context, &model);
  v1::UploadModelRequest metadata;
  metadata.mutable_metadata()->set_name("quiet");
  metadata.mutable_metadata()->set_config_json(models::ConfigToHuggingFaceJson(*models::PresetConfig("gpt2-tiny")));
  metadata.mutable_metadata()->set_total_bytes(1000);
  ASSERT_TRUE(writer->Write(metadata));
  v1::UploadModelRequest chunk;
  chunk.set_chunk(std::string(100, 'x'));
  ASSERT_TRUE(writer->Write(chunk));
  // The client sends nothing more: Finish waits for the status the server sends when the idle
  // timeout ends the call (the context's 20 s deadline would say DEADLINE_EXCEEDED without it).
  const auto silent_from = std::chrono::steady_clock::now();
  const grpc::Status status = writer->Finish();
  EXPECT_LT(std::chrono::steady_clock::now() - silent_from, 15s) << "the server, not the client's deadline, ended it";
  EXPECT_EQ(status.error_code(), grpc::StatusCode::DEADLINE_EXCEEDED) << status.error_message();
  EXPECT_NE(status.error_message().find("sent nothing"), std::string::npos) << status.error_message();
  for (const auto& file : std::filesystem::directory_iterator(data_dir_ / "uploads")) {
    ADD_FAILURE() << "left behind: " << file.path();
  }
}

// What the first message says is checked before any weights are sent: the answer comes while the
// stream is still open, naming the field (not the missing bytes it would name after them).
v1::UploadModelRequest UploadMetadata(const std::string& config_json) {
  v1::UploadModelRequest metadata;
  metadata.mutable_metadata()->set_name("early");
  metadata.mutable_metadata()->set_config_json(config_json);
  metadata.mutable_metadata()->set_total_bytes(1 << 20);
  return metadata;
}

grpc::Status UploadMetadataOnly(Client& client, const v1::UploadModelRequest& metadata) {
  auto stub = v1::ModelService::NewStub(client.channel());
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + 20s);
  v1::Model model;
  auto writer = stub->UploadModel(&context, &model);
  EXPECT_TRUE(writer->Write(metadata));
  return writer->Finish();
}

TEST_F(SharedReplicaTest, AnUploadWithABadConfigIsRefusedBeforeItsWeightsAreSent) {
  StartServer({});
  const grpc::Status not_json = UploadMetadataOnly(*client_, UploadMetadata("{not json"));
  EXPECT_EQ(not_json.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << not_json.error_message();
  EXPECT_NE(not_json.error_message().find("config"), std::string::npos) << not_json.error_message();
  const grpc::Status missing = UploadMetadataOnly(*client_, UploadMetadata(""));
  EXPECT_EQ(missing.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << missing.error_message();
  EXPECT_NE(missing.error_message().find("config_json"), std::string::npos) << missing.error_message();
  auto unknown = UploadMetadata(R"({"model_type": "mamba"})");
  const grpc::Status family = UploadMetadataOnly(*client_, unknown);
  EXPECT_EQ(family.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << family.error_message();
  EXPECT_NE(family.error_message().find("mamba"), std::string::npos) << family.error_message();
}

TEST_F(SharedReplicaTest, AnUploadOfATorchScriptModuleSaysToRegisterItFromTheModelRoot) {
  StartServer({});
  auto metadata = UploadMetadata("");
  metadata.mutable_metadata()->set_format(v1::MODEL_FILE_FORMAT_TORCHSCRIPT);
  const grpc::Status status = UploadMetadataOnly(*client_, metadata);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNIMPLEMENTED) << status.error_message();
  EXPECT_NE(status.error_message().find("RegisterModel"), std::string::npos) << status.error_message();
}

TEST_F(SharedReplicaTest, AnUploadKeepsItsAblations) {
  StartServer({});
  // A real gpt2-tiny checkpoint: exported from the built-in preset, uploaded again with an ablation.
  auto stub = v1::ModelService::NewStub(client_->channel());
  std::string file, config_json;
  {
    grpc::ClientContext context;
    v1::ExportModelRequest request;
    request.set_name("gpt2-tiny");
    auto reader = stub->ExportModel(&context, request);
    v1::ExportModelResponse part;
    while (reader->Read(&part)) {
      if (part.has_header()) config_json = part.header().config_json();
      file += part.chunk();
    }
    ASSERT_TRUE(reader->Finish().ok());
  }
  auto metadata = UploadMetadata(config_json);
  metadata.mutable_metadata()->set_name("ablated");
  metadata.mutable_metadata()->set_total_bytes(file.size());
  metadata.mutable_metadata()->mutable_ablations()->set_uniform_attention(true);
  grpc::ClientContext context;
  v1::Model model;
  auto writer = stub->UploadModel(&context, &model);
  ASSERT_TRUE(writer->Write(metadata));
  for (size_t offset = 0; offset < file.size(); offset += 1 << 20) {
    v1::UploadModelRequest chunk;
    chunk.set_chunk(file.substr(offset, 1 << 20));
    ASSERT_TRUE(writer->Write(chunk));
  }
  ASSERT_TRUE(writer->WritesDone());
  const grpc::Status status = writer->Finish();
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_TRUE(model.config().ablations().uniform_attention());
  EXPECT_FALSE(model.config().ablations().no_mlp());
}

}  // namespace
}  // namespace posbias::app
