// The logic of the model service's two streams, gRPC-free: what UploadModel does with each message
// it reads and with the whole file, and what ExportModel writes. model_transfers.h's reactors only
// move these sessions' messages on and off the wire (and time out, audit and count); tests drive
// the sessions directly (tests/api/model_streams_test.cc).
//
// An upload's life: metadata (checked before any weights are sent: name, config, size against
// max_upload_bytes and the free disk) -> chunks (staged to a scratch file as they come, the size
// capped and the disk re-checked while they stream, hashed) -> Verify (sizes and digest as
// announced) -> Register (the catalog checks and registers the file). A session destroyed before
// Register succeeds leaves no staging file and registers nothing.
//
// An export's life: Prepare (the caller's visible model written to a scratch file, waiting for
// room in the model cache and stopping when the client leaves; the header message) -> NextChunk
// until the end. The scratch file is removed with the session.
#pragma once

#include <cstdint>
#include <fstream>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "posbias/v1/model_service.pb.h"
#include "server/limits/limits.h"
#include "server/registry/model_catalog.h"
#include "server/registry/model_loader.h"
#include "server/registry/sha256.h"
#include "server/api/caller.h"
#include "server/api/model_convert.h"

namespace posbias::api {

struct UploadLimits {
  // Largest upload, enforced while it streams.
  uint64_t max_upload_bytes = limits::Default<uint64_t>(limits::Limit::kMaxUploadBytes);
  // Disk an upload leaves free in the data directory (for the job store, the index and other
  // uploads): refused up front when its announced size would not leave it, ended when the bytes
  // streamed so far would not (RESOURCE_EXHAUSTED / INSUFFICIENT_STORAGE). An export's scratch
  // copy is refused likewise before it is written.
  int64_t min_free_disk_bytes = limits::Default<int64_t>(limits::Limit::kMinFreeDiskMib) << 20;
};

// OK when writing `bytes` more into `directory` leaves `keep` bytes free (or the free space is
// unknown); else RESOURCE_EXHAUSTED / INSUFFICIENT_STORAGE saying what was not done.
absl::Status CheckDiskRoom(const std::string& directory, uint64_t bytes, int64_t keep, const std::string& what);

class UploadSession {
 public:
  // `catalog` outlives this.
  UploadSession(registry::ModelCatalog* catalog, UploadLimits limits) : catalog_(catalog), limits_(limits) {}
  ~UploadSession();  // Removes the staging file unless it was registered.
  UploadSession(const UploadSession&) = delete;
  UploadSession& operator=(const UploadSession&) = delete;

  // One message of the stream, in order: the metadata first (sets caller.resource, the audit
  // line, to the model's name), then chunks. Any refusal ends the upload.
  absl::Status Accept(Caller& caller, const v1::UploadModelRequest& message);
  // The client finished sending: the whole file's checks (metadata sent, every byte written, the
  // size and SHA-256 as announced). Accept refuses any message after it.
  absl::Status Verify();
  // Registers the verified file in the caller's namespace (slow: the catalog reads and hashes it).
  // `stop` (the client went away, the server drains) ends the load with CANCELLED.
  absl::StatusOr<v1::Model> Register(const Caller& caller, const registry::Cancelled& stop = nullptr);

  // The call ended before a registration: the staging file goes now (a registered file is the
  // catalog's).
  void Abandon();

 private:
  absl::Status ReadMetadata(Caller& caller, const v1::UploadModelRequest& message);
  absl::Status AddChunk(const std::string& chunk);
  // INSUFFICIENT_STORAGE when writing `bytes` more would leave less than the free disk kept.
  absl::Status CheckDiskRoom(uint64_t bytes) const;

  registry::ModelCatalog* catalog_;
  UploadLimits limits_;
  bool have_metadata_ = false, ended_ = false, verified_ = false, registered_ = false;
  v1::UploadModelMetadata metadata_;
  UploadRegistration upload_;
  std::string staged_;
  std::ofstream out_;
  registry::Sha256 sha_;
  uint64_t received_ = 0;
};

class ExportSession {
 public:
  // Bytes per chunk message. Small enough that a slow but steady reader completes a write well
  // within the idle timeout (the transfers cancel an export whose write in flight is not taken for
  // --export-idle-seconds): with 64 KiB, a client is idle only below about 1 KiB/s at the default
  // 60 s, where 1 MiB messages counted a reader of 1 MiB every 4 s as idle at 2 s.
  static constexpr size_t kChunkBytes = size_t{64} << 10;

  // `catalog` outlives this.
  explicit ExportSession(registry::ModelCatalog* catalog,
                         int64_t min_free_disk_bytes = limits::Default<int64_t>(limits::Limit::kMinFreeDiskMib) << 20)
      : catalog_(catalog), min_free_disk_bytes_(min_free_disk_bytes) {}
  ~ExportSession();  // Removes the scratch file.
  ExportSession(const ExportSession&) = delete;
  ExportSession& operator=(const ExportSession&) = delete;

  // Sets caller.resource (audited: weights leave the server), finds the model the caller sees and
  // writes its weights to a scratch file (refused with INSUFFICIENT_STORAGE when it would not
  // leave min_free_disk_bytes free); the stream's first message (the header). CANCELLED once
  // `cancelled` turns true.
  absl::StatusOr<v1::ExportModelResponse> Prepare(Caller& caller, const v1::ExportModelRequest& request,
                                                  const registry::Cancelled& cancelled);
  // The next message of at most kChunkBytes of the file; nullopt after the last.
  std::optional<v1::ExportModelResponse> NextChunk();
  // The call ended: the scratch file goes now.
  void Close();

 private:
  registry::ModelCatalog* catalog_;
  int64_t min_free_disk_bytes_;
  std::string path_;
  std::ifstream in_;
  std::string buffer_;
};

}  // namespace posbias::api
