#include "server/api/model_streams.h"

#include <filesystem>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/host/disk.h"
#include "server/models/config.h"
#include "server/registry/scratch_files.h"
#include "server/api/enum_check.h"
#include "server/api/model_visibility.h"
#include "server/status/error.h"

namespace posbias::api {
namespace {

// The free disk is checked again after every this many bytes: other writers share the disk.
constexpr uint64_t kDiskCheckBytes = uint64_t{16} << 20;

void RemoveQuietly(const std::string& path) {
  std::error_code ignored;
  if (!path.empty()) std::filesystem::remove(path, ignored);
}

absl::Status MissingMetadata() {
  return InvalidArgumentError({ErrorReason::kEmptyRequest, "metadata", "missing", "a first message with metadata"});
}

absl::Status CannotWrite() {
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                         "cannot write the upload to the data directory (disk full?); nothing was registered");
}

}  // namespace

// ---- UploadSession ----------------------------------------------------------------------------

UploadSession::~UploadSession() { Abandon(); }

void UploadSession::Abandon() {
  out_.close();
  if (!registered_) RemoveQuietly(staged_);
}

absl::Status UploadSession::Accept(Caller& caller, const v1::UploadModelRequest& message) {
  if (ended_) return absl::FailedPreconditionError("the upload already ended");
  if (auto status = CheckEnumValues(message); !status.ok()) return status;
  return have_metadata_ ? AddChunk(message.chunk()) : ReadMetadata(caller, message);
}

absl::Status UploadSession::ReadMetadata(Caller& caller, const v1::UploadModelRequest& message) {
  if (!message.has_metadata()) return MissingMetadata();
  metadata_ = message.metadata();
  caller.resource = metadata_.name();
  auto upload = UploadFromMetadata(metadata_);  // Refused before any weights are sent.
  if (!upload.ok()) return upload.status();
  upload_ = *std::move(upload);
  if (metadata_.total_bytes() > limits_.max_upload_bytes) {
    return TooLargeError("total_bytes", std::to_string(metadata_.total_bytes()),
                         limits::Allowed(limits::Limit::kMaxUploadBytes, static_cast<double>(limits_.max_upload_bytes)));
  }
  if (auto room = CheckDiskRoom(metadata_.total_bytes()); !room.ok()) return room;
  have_metadata_ = true;
  staged_ = registry::ScratchPath(catalog_->uploads_dir(), "staging", metadata_.name());
  out_.open(staged_, std::ios::binary | std::ios::trunc);
  if (!out_) return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError, "cannot stage the upload");
  return absl::OkStatus();
}

absl::Status CheckDiskRoom(const std::string& directory, uint64_t bytes, int64_t keep, const std::string& what) {
  const int64_t available = host::AvailableDiskBytes(directory);
  if (available < 0 || static_cast<double>(bytes) + static_cast<double>(keep) <= static_cast<double>(available)) {
    return absl::OkStatus();
  }
  return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                         absl::StrCat("the data directory has ", available >> 20, " MiB free; writing ", bytes >> 20,
                                      " MiB more would leave less than the ", keep >> 20,
                                      " MiB this server keeps free (--min-free-disk-mib); ", what));
}

absl::Status UploadSession::CheckDiskRoom(uint64_t bytes) const {
  return api::CheckDiskRoom(catalog_->uploads_dir(), bytes, limits_.min_free_disk_bytes, "nothing was registered");
}

absl::Status UploadSession::AddChunk(const std::string& chunk) {
  received_ += chunk.size();
  if (received_ > limits_.max_upload_bytes) {
    return TooLargeError("upload", absl::StrCat("more than ", limits_.max_upload_bytes, " bytes"),
                         limits::Allowed(limits::Limit::kMaxUploadBytes, static_cast<double>(limits_.max_upload_bytes)));
  }
  if (metadata_.total_bytes() > 0 && received_ > metadata_.total_bytes()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "total_bytes", std::to_string(metadata_.total_bytes()),
                                 absl::StrCat("the bytes sent (more than ", metadata_.total_bytes(), ")")});
  }
  if (received_ / kDiskCheckBytes != (received_ - chunk.size()) / kDiskCheckBytes) {
    if (auto room = CheckDiskRoom(chunk.size()); !room.ok()) return room;
  }
  out_.write(chunk.data(), static_cast<std::streamsize>(chunk.size()));
  if (!out_) return CannotWrite();
  sha_.Update(chunk.data(), chunk.size());
  return absl::OkStatus();
}

absl::Status UploadSession::Verify() {
  ended_ = true;
  if (!have_metadata_) return MissingMetadata();
  out_.close();
  if (!out_) return CannotWrite();
  if (metadata_.total_bytes() > 0 && received_ != metadata_.total_bytes()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "total_bytes", std::to_string(metadata_.total_bytes()),
                                 absl::StrCat("the bytes sent (", received_, ")")});
  }
  const std::string digest = sha_.HexDigest();
  if (!metadata_.sha256().empty() && metadata_.sha256() != digest) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kChecksumMismatch,
                           absl::StrCat("uploaded bytes have SHA-256 ", digest, ", the client announced ",
                                        metadata_.sha256()));
  }
  verified_ = true;
  return absl::OkStatus();
}

absl::StatusOr<v1::Model> UploadSession::Register(const Caller& caller, const registry::Cancelled& stop) {
  if (!verified_) return absl::FailedPreconditionError("the upload is not verified");
  auto entry = catalog_->RegisterUpload(upload_.name, staged_, upload_.config_json, upload_.ablations, upload_.labels,
                                        upload_.request_id, ModelTenantOf(caller), stop);
  if (!entry.ok()) return entry.status();
  registered_ = true;  // The catalog owns the file now.
  v1::Model model;
  ModelToProto(*entry, 0, &model);
  return model;
}

// ---- ExportSession ----------------------------------------------------------------------------

ExportSession::~ExportSession() { Close(); }

void ExportSession::Close() {
  in_.close();
  RemoveQuietly(path_);
}

absl::StatusOr<v1::ExportModelResponse> ExportSession::Prepare(Caller& caller, const v1::ExportModelRequest& request,
                                                               const registry::Cancelled& cancelled) {
  caller.resource = request.name();
  auto entry = FindVisibleModel(*catalog_, caller, request.name());
  if (!entry.ok()) return entry.status();
  // The scratch copy is the float32 file: four bytes a parameter (its header is small).
  const double parameters = entry->parameters > 0 ? static_cast<double>(entry->parameters)
                                                  : models::EstimatedParameters(entry->config);
  if (auto room = CheckDiskRoom(catalog_->uploads_dir(), static_cast<uint64_t>(4.0 * parameters), min_free_disk_bytes_,
                                "try the export again later");
      !room.ok()) {
    return room;
  }
  path_ = registry::ScratchPath(catalog_->uploads_dir(), "export", entry->name);
  if (auto status = catalog_->Export(registry::ModelPath(*entry), path_, cancelled); !status.ok()) return status;
  if (cancelled && cancelled()) return absl::CancelledError("export cancelled");
  v1::ExportModelResponse message;
  auto* header = message.mutable_header();
  header->set_format(v1::MODEL_FILE_FORMAT_SAFETENSORS);
  header->set_total_bytes(std::filesystem::file_size(path_));
  header->set_sha256(registry::Sha256OfFile(path_).value_or(""));
  header->set_file_name(entry->name + ".safetensors");
  header->set_config_json(models::ConfigToHuggingFaceJson(entry->config));
  in_.open(path_, std::ios::binary);
  buffer_.assign(kChunkBytes, '\0');
  return message;
}

std::optional<v1::ExportModelResponse> ExportSession::NextChunk() {
  if (!in_.is_open()) return std::nullopt;
  in_.read(buffer_.data(), static_cast<std::streamsize>(buffer_.size()));
  if (in_.gcount() <= 0) return std::nullopt;
  v1::ExportModelResponse message;
  message.set_chunk(buffer_.data(), static_cast<size_t>(in_.gcount()));
  return message;
}

}  // namespace posbias::api
