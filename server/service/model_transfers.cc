#include "server/service/model_transfers.h"

#include "server/service/enum_check.h"

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/host/disk.h"
#include "server/limits/limits.h"
#include "server/registry/scratch_files.h"
#include "server/registry/sha256.h"
#include "server/service/model_convert.h"
#include "server/service/model_visibility.h"
#include "server/service/rpc_scope.h"
#include "server/service/unary_call.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

constexpr size_t kChunkBytes = 1 << 20;
constexpr uint64_t kDiskCheckBytes = uint64_t{16} << 20;

void RemoveQuietly(const std::string& path) {
  std::error_code ignored;
  if (!path.empty()) std::filesystem::remove(path, ignored);
}

}  // namespace

// ---- UploadModel ------------------------------------------------------------------------------

class ModelTransfers::UploadReactor final : public grpc::ServerReadReactor<v1::UploadModelRequest>,
                                            public std::enable_shared_from_this<UploadReactor> {
 public:
  UploadReactor(ModelTransfers* hub, grpc::CallbackServerContext* context, v1::Model* response)
      : hub_(hub), context_(context), response_(response), scope_(hub->metrics_, std::string(hub->auth_->MethodFor(v1::UploadModelRequest::descriptor()))) {}

  void Begin(Caller caller) {
    caller_ = std::move(caller);
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    std::unique_lock lock(mutex_);
    if (finished_) return;
    last_activity_ = std::chrono::steady_clock::now();
    if (!ok) {  // The client finished sending (or went away: OnCancel ends the call).
      lock.unlock();
      Complete();
      return;
    }
    absl::Status status = CheckEnumValues(message_);
    if (status.ok()) status = have_metadata_ ? AddChunk() : ReadMetadata();
    lock.unlock();
    if (!status.ok()) {
      End(status);
      return;
    }
    StartRead(&message_);
  }

  void OnCancel() override { End(absl::CancelledError("the client cancelled the upload; nothing was registered")); }

  void OnDone() override {
    auto self = shared_from_this();
    hub_->Forget(this);
  }

  // Ends an upload that sent nothing for `timeout` (not one being registered).
  void EndIfIdle(std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout) {
    {
      std::lock_guard lock(mutex_);
      if (finished_ || registering_ || now - last_activity_ < timeout) return;
    }
    End(ErrorWithReason(absl::StatusCode::kDeadlineExceeded, ErrorReason::kInvalidArgument,
                        absl::StrCat("the upload sent nothing for ", timeout.count() / 1000, " s (",
                                     limits::Allowed(limits::Limit::kUploadIdleSeconds,
                                                     static_cast<double>(timeout.count()) / 1000.0),
                                     " between messages); nothing was registered")));
  }

  // Finishes the call once, removing the staging file.
  void End(const absl::Status& status) {
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      finished_ = true;
      out_.close();
      RemoveQuietly(staged_);
    }
    CallAuth::Audit(caller_, status);
    Finish(scope_.Finish(status, context_));
  }

 private:
  absl::Status ReadMetadata() {  // Caller holds mutex_.
    if (!message_.has_metadata()) {
      return InvalidArgumentError({ErrorReason::kEmptyRequest, "metadata", "missing", "a first message with metadata"});
    }
    metadata_ = message_.metadata();
    caller_.resource = metadata_.name();
    auto upload = UploadFromMetadata(metadata_);  // Refused before any weights are sent.
    if (!upload.ok()) return upload.status();
    upload_ = *std::move(upload);
    const auto cap = static_cast<uint64_t>(hub_->options_.max_upload_bytes);
    if (metadata_.total_bytes() > cap) {
      return TooLargeError("total_bytes", std::to_string(metadata_.total_bytes()),
                           limits::Allowed(limits::Limit::kMaxUploadBytes, static_cast<double>(cap)));
    }
    if (auto room = CheckDiskRoom(metadata_.total_bytes()); !room.ok()) return room;
    have_metadata_ = true;
    staged_ = registry::ScratchPath(hub_->catalog_->uploads_dir(), "staging", metadata_.name());
    out_.open(staged_, std::ios::binary | std::ios::trunc);
    if (!out_) return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError, "cannot stage the upload");
    return absl::OkStatus();
  }

  // INSUFFICIENT_STORAGE when writing `bytes` more would leave less than the configured free disk.
  absl::Status CheckDiskRoom(uint64_t bytes) const {
    const int64_t available = host::AvailableDiskBytes(hub_->catalog_->uploads_dir());
    const int64_t keep = hub_->options_.min_free_disk_bytes;
    if (available < 0 || static_cast<double>(bytes) + static_cast<double>(keep) <= static_cast<double>(available)) {
      return absl::OkStatus();
    }
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                           absl::StrCat("the data directory has ", available >> 20, " MiB free; storing ", bytes >> 20,
                                        " MiB more would leave less than the ", keep >> 20,
                                        " MiB this server keeps free (--min-free-disk-mib); nothing was registered"));
  }

  absl::Status AddChunk() {  // Caller holds mutex_.
    const std::string& chunk = message_.chunk();
    received_ += chunk.size();
    const auto cap = static_cast<uint64_t>(hub_->options_.max_upload_bytes);
    if (received_ > cap) {
      return TooLargeError("upload", absl::StrCat("more than ", cap, " bytes"),
                           limits::Allowed(limits::Limit::kMaxUploadBytes, static_cast<double>(cap)));
    }
    if (metadata_.total_bytes() > 0 && received_ > metadata_.total_bytes()) {
      return InvalidArgumentError({ErrorReason::kInvalidArgument, "total_bytes", std::to_string(metadata_.total_bytes()),
                                   absl::StrCat("the bytes sent (more than ", metadata_.total_bytes(), ")")});
    }
    // Checked again every kDiskCheckBytes: other writers share the disk.
    if (received_ / kDiskCheckBytes != (received_ - chunk.size()) / kDiskCheckBytes) {
      if (auto room = CheckDiskRoom(chunk.size()); !room.ok()) return room;
    }
    out_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    if (!out_) {
      return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                             "cannot write the upload to the data directory (disk full?); nothing was registered");
    }
    sha_.Update(chunk.data(), chunk.size());
    return absl::OkStatus();
  }

  // The whole file arrived: check it, then register it on the executor.
  void Complete() {
    absl::Status status;
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      out_.close();
      const std::string digest = sha_.HexDigest();
      if (context_->IsCancelled()) {
        status = absl::CancelledError("the client cancelled the upload; nothing was registered");
      } else if (!have_metadata_) {
        status = InvalidArgumentError({ErrorReason::kEmptyRequest, "metadata", "missing", "a first message with metadata"});
      } else if (!out_) {
        status = ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                                 "cannot write the upload to the data directory (disk full?)");
      } else if (metadata_.total_bytes() > 0 && received_ != metadata_.total_bytes()) {
        status = InvalidArgumentError({ErrorReason::kInvalidArgument, "total_bytes", std::to_string(metadata_.total_bytes()),
                                       absl::StrCat("the bytes sent (", received_, ")")});
      } else if (!metadata_.sha256().empty() && metadata_.sha256() != digest) {
        status = ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kChecksumMismatch,
                                 absl::StrCat("uploaded bytes have SHA-256 ", digest, ", the client announced ",
                                              metadata_.sha256()));
      }
      if (status.ok()) registering_ = true;
    }
    if (!status.ok()) return End(status);
    auto self = shared_from_this();
    if (!hub_->executor_->TrySubmit([self] { self->Register(); })) End(ServerBusy(*hub_->executor_));
  }

  void Register() {
    auto entry = hub_->catalog_->RegisterUpload(upload_.name, staged_, upload_.config_json, upload_.ablations,
                                                upload_.labels, upload_.request_id, ModelTenantOf(caller_));
    if (entry.ok()) ModelToProto(*entry, 0, response_);
    End(entry.status());
  }

  ModelTransfers* hub_;
  grpc::CallbackServerContext* context_;
  v1::Model* response_;
  RpcScope scope_;
  Caller caller_;
  std::mutex mutex_;
  bool finished_ = false, have_metadata_ = false, registering_ = false;
  std::chrono::steady_clock::time_point last_activity_ = std::chrono::steady_clock::now();
  v1::UploadModelRequest message_;
  v1::UploadModelMetadata metadata_;
  UploadRegistration upload_;
  std::string staged_;
  std::ofstream out_;
  registry::Sha256 sha_;
  uint64_t received_ = 0;
};

// ---- ExportModel ------------------------------------------------------------------------------

class ModelTransfers::ExportReactor final : public grpc::ServerWriteReactor<v1::ExportModelResponse> {
 public:
  ExportReactor(ModelTransfers* hub, grpc::CallbackServerContext* context, std::string name)
      : hub_(hub), context_(context), name_(std::move(name)), scope_(hub->metrics_, std::string(hub->auth_->MethodFor(v1::ExportModelRequest::descriptor()))) {}

  void Begin(Caller caller) {
    caller_ = std::move(caller);
    caller_.resource = name_;  // Audited: weights leave the server.
    if (!hub_->executor_->TrySubmit([this] { Prepare(); })) End(ServerBusy(*hub_->executor_));
  }
  void Refuse(const absl::Status& status) { End(status); }

  void OnWriteDone(bool ok) override {
    if (!ok || cancelled_) return End(absl::CancelledError("the client stopped reading the export"));
    in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
    if (in_.gcount() <= 0) return End(absl::OkStatus());
    message_.Clear();
    message_.set_chunk(buffer_.data(), static_cast<size_t>(in_.gcount()));
    StartWrite(&message_);
  }

  void OnCancel() override { cancelled_ = true; }  // A write in flight then completes with !ok.
  void OnDone() override { delete this; }

 private:
  // On the executor: the weights to a scratch file, then the header.
  void Prepare() {
    auto entry = FindVisibleModel(*hub_->catalog_, caller_, name_);
    if (!entry.ok()) return End(entry.status());
    path_ = registry::ScratchPath(hub_->catalog_->uploads_dir(), "export", entry->name);
    // The build waits for room in the model cache's budget and stops with the client.
    auto cancelled = [this] { return cancelled_.load() || context_->IsCancelled(); };
    if (auto status = hub_->catalog_->Export(registry::ModelPath(*entry), path_, cancelled); !status.ok()) {
      return End(status);
    }
    if (cancelled_) return End(absl::CancelledError("export cancelled"));
    auto* header = message_.mutable_header();
    header->set_format(v1::MODEL_FILE_FORMAT_SAFETENSORS);
    header->set_total_bytes(std::filesystem::file_size(path_));
    header->set_sha256(registry::Sha256OfFile(path_).value_or(""));
    header->set_file_name(entry->name + ".safetensors");
    header->set_config_json(models::ConfigToHuggingFaceJson(entry->config));
    in_.open(path_, std::ios::binary);
    buffer_.assign(kChunkBytes, '\0');
    StartWrite(&message_);
  }

  void End(const absl::Status& status) {
    if (ended_.exchange(true)) return;
    in_.close();
    RemoveQuietly(path_);
    CallAuth::Audit(caller_, status);  // Nothing for a refused call (its caller was never admitted).
    Finish(scope_.Finish(status, context_));
  }

  ModelTransfers* hub_;
  grpc::CallbackServerContext* context_;
  std::string name_, path_;
  RpcScope scope_;
  Caller caller_;
  std::atomic<bool> cancelled_{false}, ended_{false};
  std::ifstream in_;
  std::string buffer_;
  v1::ExportModelResponse message_;  // Alive while its write is in flight.
};

// ---- The transfers ----------------------------------------------------------------------------

ModelTransfers::ModelTransfers(registry::ModelCatalog* catalog, metrics::Metrics* metrics, Options options)
    : catalog_(catalog), metrics_(metrics), options_(options) {}

ModelTransfers::~ModelTransfers() { Stop(); }

void ModelTransfers::Start(CallExecutor* executor, const CallAuth* auth) {
  executor_ = executor;
  auth_ = auth;
  watchdog_ = std::thread([this] { Watchdog(); });
}

void ModelTransfers::Stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  for (const auto& upload : uploads_.Snapshot()) {
    upload->End(ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown,
                                "the server is shutting down; upload again after it restarts"));
  }
}

grpc::ServerReadReactor<v1::UploadModelRequest>* ModelTransfers::UploadModel(grpc::CallbackServerContext* context,
                                                                        v1::Model* response) {
  auto upload = std::make_shared<UploadReactor>(this, context, response);
  bool stopping;
  {
    std::lock_guard lock(mutex_);
    stopping = stopping_;
  }
  uploads_.Add(upload);  // Kept until its OnDone.
  auto caller = auth_->Admit(context, v1::UploadModelRequest::descriptor());
  if (!caller.ok()) {
    upload->End(caller.status());
  } else if (stopping) {
    upload->End(ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown, "the server is shutting down"));
  } else {
    upload->Begin(*std::move(caller));
  }
  return upload.get();
}

grpc::ServerWriteReactor<v1::ExportModelResponse>* ModelTransfers::ExportModel(grpc::CallbackServerContext* context,
                                                                          const v1::ExportModelRequest* request) {
  auto* reactor = new ExportReactor(this, context, request->name());  // Deleted in its OnDone.
  auto caller = auth_->AdmitRequest(context, *request);
  if (!caller.ok()) {
    reactor->Refuse(caller.status());
  } else {
    reactor->Begin(*std::move(caller));
  }
  return reactor;
}

void ModelTransfers::Forget(UploadReactor* upload) { uploads_.Remove(upload); }

void ModelTransfers::Watchdog() {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, std::chrono::seconds(1), [this] { return stopping_; })) {
    lock.unlock();
    const auto now = std::chrono::steady_clock::now();
    for (const auto& upload : uploads_.Snapshot()) upload->EndIfIdle(now, options_.upload_idle_timeout);
    lock.lock();
  }
}

}  // namespace posbias::service
