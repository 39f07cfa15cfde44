// The model service's two streams as gRPC-free sessions (api/model_streams.h), driven
// directly: a real catalog over LibTorch's CPU loader, the built-in gpt2-tiny preset, no gRPC.
#include "server/api/model_streams.h"

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "server/runners/runtime.h"
#include "server/api/model_visibility.h"
#include "server/status/error.h"
#include "tests/api/handler_fixtures.h"

namespace posbias::api {
namespace {
namespace fs = std::filesystem;

v1::UploadModelRequest Metadata(const std::string& name, const v1::ExportModelResponse& header) {
  v1::UploadModelRequest message;
  auto* metadata = message.mutable_metadata();
  metadata->set_name(name);
  metadata->set_config_json(header.header().config_json());
  metadata->set_total_bytes(header.header().total_bytes());
  metadata->set_sha256(header.header().sha256());
  return message;
}

v1::UploadModelRequest Chunk(const std::string& bytes) {
  v1::UploadModelRequest message;
  message.set_chunk(bytes);
  return message;
}

class ModelStreamsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    base_ = FreshTestDirectory("model_streams_test");
    runtime_ = runners::Runtime::Create({});
    catalog_ = *registry::ModelCatalog::Open({(base_ / "root").string(), base_.string()}, runtime_->loader());
  }
  void TearDown() override { fs::remove_all(base_); }

  // The export of `name` as `caller` sees it: the header, then the file's bytes.
  std::pair<v1::ExportModelResponse, std::string> ExportAll(Caller& caller, const std::string& name) {
    ExportSession session(catalog_.get());
    v1::ExportModelRequest request;
    request.set_name(name);
    auto header = session.Prepare(caller, request, [] { return false; });
    EXPECT_TRUE(header.ok()) << header.status();
    if (!header.ok()) return {};
    std::string bytes;
    size_t chunks = 0;
    while (auto chunk = session.NextChunk()) {
      EXPECT_LE(chunk->chunk().size(), ExportSession::kChunkBytes);
      bytes += chunk->chunk();
      ++chunks;
    }
    EXPECT_GE(chunks, 1u);
    return {*header, bytes};
  }

  // Files an upload left in the data directory's uploads folder.
  size_t LeftoverUploads() const {
    size_t files = 0;
    if (fs::exists(catalog_->uploads_dir())) {
      for (const auto& entry : fs::directory_iterator(catalog_->uploads_dir())) files += entry.is_regular_file();
    }
    return files;
  }

  fs::path base_;
  std::unique_ptr<runners::Runtime> runtime_;
  std::unique_ptr<registry::ModelCatalog> catalog_;
  Caller lab_a_ = CallerOf("lab-a"), lab_b_ = CallerOf("lab-b");
};

TEST_F(ModelStreamsTest, AnExportedPresetUploadedAgainRegistersTheSameWeightsInTheCallersNamespace) {
  auto [header, bytes] = ExportAll(lab_a_, "gpt2-tiny");
  EXPECT_EQ(lab_a_.resource, "gpt2-tiny") << "an export is audited by name";
  ASSERT_EQ(bytes.size(), header.header().total_bytes());
  EXPECT_EQ(header.header().file_name(), "gpt2-tiny.safetensors");

  UploadSession upload(catalog_.get(), {});
  ASSERT_TRUE(upload.Accept(lab_a_, Metadata("copy", header)).ok());
  EXPECT_EQ(lab_a_.resource, "copy");
  const size_t half = bytes.size() / 2;
  ASSERT_TRUE(upload.Accept(lab_a_, Chunk(bytes.substr(0, half))).ok());
  ASSERT_TRUE(upload.Accept(lab_a_, Chunk(bytes.substr(half))).ok());
  ASSERT_TRUE(upload.Verify().ok());
  auto model = upload.Register(lab_a_);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->name(), "copy");
  EXPECT_EQ(model->tenant(), "lab-a");
  EXPECT_EQ(model->weights_sha256(), header.header().sha256());

  v1::ExportModelRequest other;
  other.set_name("copy");
  ExportSession hidden(catalog_.get());
  EXPECT_EQ(ErrorReasonOf(hidden.Prepare(lab_b_, other, [] { return false; }).status()), "MODEL_NOT_FOUND")
      << "another tenant's model cannot be exported";
  EXPECT_EQ(ExportAll(lab_a_, "copy").second, bytes) << "the uploaded model exports to the same bytes";
}

TEST_F(ModelStreamsTest, AnUploadRefusedAnywhereLeavesNoFileAndRegistersNothing) {
  auto [header, bytes] = ExportAll(lab_a_, "gpt2-tiny");
  {
    UploadSession upload(catalog_.get(), {});
    EXPECT_EQ(ErrorReasonOf(upload.Accept(lab_a_, Chunk("weights first"))), "EMPTY_REQUEST");
  }
  {
    UploadSession upload(catalog_.get(), {});
    auto wrong = Metadata("wrong-digest", header);
    wrong.mutable_metadata()->set_sha256(std::string(64, '0'));
    ASSERT_TRUE(upload.Accept(lab_a_, wrong).ok());
    ASSERT_TRUE(upload.Accept(lab_a_, Chunk(bytes)).ok());
    EXPECT_GT(LeftoverUploads(), 0u) << "staged while it streams";
    EXPECT_EQ(ErrorReasonOf(upload.Verify()), "CHECKSUM_MISMATCH");
    EXPECT_EQ(upload.Register(lab_a_).status().code(), absl::StatusCode::kFailedPrecondition);
  }
  {
    UploadSession upload(catalog_.get(), {});
    ASSERT_TRUE(upload.Accept(lab_a_, Metadata("short", header)).ok());
    ASSERT_TRUE(upload.Accept(lab_a_, Chunk(bytes.substr(0, 10))).ok());
    const absl::Status status = upload.Verify();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(ErrorFieldOf(status), "total_bytes");
    EXPECT_EQ(upload.Accept(lab_a_, Chunk(bytes.substr(0, 10))).code(), absl::StatusCode::kFailedPrecondition)
        << "the upload has ended";
  }
  {
    UploadSession upload(catalog_.get(), {});
    ASSERT_TRUE(upload.Accept(lab_a_, Metadata("long", header)).ok());
    ASSERT_TRUE(upload.Accept(lab_a_, Chunk(bytes)).ok());
    EXPECT_EQ(ErrorFieldOf(upload.Accept(lab_a_, Chunk("x"))), "total_bytes") << "a byte past the announced size";
    upload.Abandon();
    EXPECT_EQ(LeftoverUploads(), 0u) << "an abandoned upload's staging file goes at once";
  }
  EXPECT_EQ(LeftoverUploads(), 0u);
  for (const std::string name : {"wrong-digest", "short", "long"}) {
    EXPECT_EQ(ErrorReasonOf(FindVisibleModel(*catalog_, lab_a_, name).status()), "MODEL_NOT_FOUND") << name;
  }
}

TEST_F(ModelStreamsTest, AnUploadOverTheCapIsRefusedFromItsMetadataAndWhileItStreams) {
  auto [header, bytes] = ExportAll(lab_a_, "gpt2-tiny");
  UploadLimits small;
  small.max_upload_bytes = bytes.size() - 1;
  {
    UploadSession upload(catalog_.get(), small);
    const absl::Status status = upload.Accept(lab_a_, Metadata("big", header));
    EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_EQ(ErrorReasonOf(status), "REQUEST_TOO_LARGE");
    EXPECT_EQ(ErrorFieldOf(status), "total_bytes");
  }
  {
    auto announced_small = Metadata("big", header);
    announced_small.mutable_metadata()->set_total_bytes(10);
    UploadSession upload(catalog_.get(), small);
    ASSERT_TRUE(upload.Accept(lab_a_, announced_small).ok());
    const absl::Status status = upload.Accept(lab_a_, Chunk(bytes));
    EXPECT_EQ(ErrorReasonOf(status), "REQUEST_TOO_LARGE") << "the cap holds while the bytes stream";
    EXPECT_EQ(ErrorFieldOf(status), "upload");
  }
  EXPECT_EQ(LeftoverUploads(), 0u);
}

TEST_F(ModelStreamsTest, AnExportWhoseClientLeftStopsCancelled) {
  ExportSession session(catalog_.get());
  v1::ExportModelRequest request;
  request.set_name("gpt2-tiny");
  EXPECT_EQ(session.Prepare(lab_a_, request, [] { return true; }).status().code(), absl::StatusCode::kCancelled);
  EXPECT_FALSE(session.NextChunk().has_value());
}

}  // namespace
}  // namespace posbias::api
