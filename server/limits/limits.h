// Every limit a client can meet, in one table: its name, flag and environment variable (none for a
// fixed limit), unit, default, the range an operator may set, and the status and reason a client
// gets past it. Everything else is made from it:
//   - the server's flags (main.cc adds each configurable limit with AddLimitFlag's loop over All());
//   - the defaults of the options structs (Default<T>(Limit::k...));
//   - the `allowed` text of refusals (Allowed), which names the flag to change;
//   - and the docs: limits_test reads the two tables of docs/operations/limits.md and every proto comment that
//     names a flag, and fails on a default, flag, variable or reason that disagrees with the table.
// Torch-free and gRPC-free.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "server/status/error_reason.h"

namespace posbias::limits {

// X(id, name, flag ("" = fixed), unit, default, lowest, highest settable, code, reason, shown, help).
// `shown` is the default as the docs write it (limits_test checks that it reads as the default).
// `code`/`reason`: what a client past the limit gets (reason kInternalError: gRPC's own status, no
// posbias reason).
#define POSBIAS_LIMITS(X)                                                                                           \
  /* Density RPCs. */                                                                                               \
  X(kMaxPoints, "max_points", "--max-points", "points", 1e6, 1, 1e8, kResourceExhausted, kRequestTooLarge,          \
    "1,000,000", "Most continuum points per request")                                                               \
  X(kMaxDiscreteLength, "max_discrete_length", "--max-discrete-length", "positions", 1e7, 1, 1e9,                   \
    kResourceExhausted, kRequestTooLarge, "10,000,000", "Largest L of a discrete profile")                          \
  X(kMaxDiscreteWork, "max_discrete_work", "--max-discrete-work", "layer-positions (H*L)", 4e9, 1, 1e15,            \
    kResourceExhausted, kRequestTooLarge, "4e9", "Largest H*L of a discrete profile (a windowed layer counts 16)")   \
  X(kMaxReturnedPositions, "max_returned_positions", "--max-returned-positions", "positions", 1e6, 1, 1e7,          \
    kResourceExhausted, kRequestTooLarge, "1,000,000", "Most positions in one response")                            \
  X(kMaxDepth, "max_depth", "", "layers", 100000, 100000, 100000, kInvalidArgument, kInvalidDepth, "100,000",       \
    "Largest H with a constant alpha")                                                                              \
  X(kMaxScheduleDepth, "max_schedule_depth", "", "layers", 4096, 4096, 4096, kInvalidArgument, kInvalidDepth,       \
    "4,096", "Largest H with a per-layer alpha schedule")                                                           \
  X(kMaxFitValues, "max_fit_values", "", "values", 65536, 65536, 65536, kResourceExhausted, kRequestTooLarge,       \
    "65,536", "Most measured values in one fit")                                                                    \
  X(kMaxFitDepth, "max_fit_depth", "", "layers", 4096, 4096, 4096, kInvalidArgument, kInvalidDepth, "4,096",        \
    "Largest depth a fit tries")                                                                                    \
  X(kMaxFitDepths, "max_fit_depths", "", "depths", 64, 64, 64, kInvalidArgument, kInvalidDepth, "64",               \
    "Most depths one fit tries")                                                                                    \
  X(kMaxFitWork, "max_fit_work", "", "layer-positions (max depth * L)", 16777216, 16777216, 16777216,               \
    kResourceExhausted, kRequestTooLarge, "2^24", "Largest max_depth * L of a fit")                                 \
  /* Calls, streams and messages. */                                                                                \
  X(kMaxMessageBytes, "max_message_bytes", "--max-message-bytes", "bytes", 67108864, 1048576, 1073741824,          \
    kResourceExhausted, kInternalError, "64 MiB", "Largest gRPC message")                                           \
  X(kRpcThreads, "rpc_threads", "--rpc-threads", "threads", 16, 2, 1024, kResourceExhausted, kServerBusy, "16",     \
    "Threads working on calls at once")                                                                             \
  X(kMaxWaitingCalls, "max_waiting_calls", "--max-waiting-calls", "calls", 4096, 1, 1048576, kResourceExhausted,    \
    kServerBusy, "4,096", "Calls waiting for a thread")                                                             \
  X(kMaxWatchStreams, "max_watch_streams", "--max-watch-streams", "streams", 1000, 1, 1048576, kResourceExhausted,  \
    kServerBusy, "1,000", "Open WatchJob streams")                                                                  \
  X(kTenantShare, "tenant_share", "--tenant-share", "fraction", 0.5, 0.01, 1, kResourceExhausted, kQueueFull, "0.5",  \
    "Share of the job queue, the WatchJob streams and the RPC threads one tenant may hold while another waits")                \
  X(kMaxTokenizeTextBytes, "max_tokenize_text_bytes", "", "bytes", 1048576, 1048576, 1048576, kResourceExhausted,   \
    kRequestTooLarge, "1 MiB", "Largest text of one Tokenize call")                                                 \
  X(kMaxTokenizeIds, "max_tokenize_ids", "", "ids", 1048576, 1048576, 1048576, kResourceExhausted,                  \
    kRequestTooLarge, "2^20", "Most token ids of one Tokenize call")                                                \
  /* Models. */                                                                                                     \
  X(kUploadIdleSeconds, "upload_idle_seconds", "--upload-idle-seconds", "seconds", 60, 1, 3600, kDeadlineExceeded,  \
    kInvalidArgument, "60 s", "An upload that sends nothing this long is ended")                                    \
  X(kExportIdleSeconds, "export_idle_seconds", "--export-idle-seconds", "seconds", 60, 1, 3600, kCancelled,        \
    kInternalError, "60 s", "An export whose client takes no 64 KiB chunk this long is ended")                             \
  X(kMaxExportsPerPrincipal, "max_exports_per_principal", "--max-exports-per-principal", "streams", 2, 1, 1024,     \
    kResourceExhausted, kQuotaExceeded, "2", "ExportModel streams one tenant's principals together may have open at once")            \
  X(kMaxUploadBytes, "max_upload_bytes", "--max-upload-bytes", "bytes", 17179869184.0, 1048576, 4398046511104.0,    \
    kResourceExhausted, kRequestTooLarge, "16 GiB", "Largest model upload")                                         \
  X(kMinFreeDiskMib, "min_free_disk_mib", "--min-free-disk-mib", "MiB", 256, 0, 1073741824, kResourceExhausted,     \
    kInsufficientStorage, "256 MiB", "Free disk an upload leaves in the data directory (refused or ended otherwise)") \
  X(kModelCacheMb, "model_cache_mb", "--model-cache-mb", "MiB", 8192, 1, 1073741824, kResourceExhausted,           \
    kInsufficientMemory, "8 GiB",                                                                                   \
    "Float32 parameters of the models kept in memory and being built (a larger model is refused)")                 \
  /* Jobs. */                                                                                                       \
  X(kMaxQueued, "max_queued", "--max-queued", "jobs", 1000, 1, 1000000, kResourceExhausted, kQueueFull, "1,000",    \
    "Most jobs waiting in the queue")                                                                               \
  X(kMaxSequenceLength, "max_sequence_length", "--max-sequence-length", "positions", 131072, 1, 1048576,            \
    kInvalidArgument, kInvalidLength, "131,072", "Largest L of a job (also at most the model's positions)")         \
  X(kMaxSamples, "max_samples", "", "samples", 65536, 65536, 65536, kInvalidArgument, kInvalidArgument, "65,536",   \
    "Most samples of a job")                                                                                        \
  X(kMaxProbes, "max_probes", "", "probes", 4096, 4096, 4096, kInvalidArgument, kInvalidArgument, "4,096",          \
    "Most Hutchinson probes per sample")                                                                            \
  X(kJobTimeLimit, "job_time_limit", "--job-time-limit", "seconds", 3600, 1, 2592000, kDeadlineExceeded,            \
    kJobTimeLimitExceeded, "1 h", "Time limit of a job that names none")                                            \
  X(kMaxJobTimeLimit, "max_job_time_limit", "--max-job-time-limit", "seconds", 86400, 1, 2592000, kInvalidArgument, \
    kInvalidArgument, "24 h", "Largest time limit a job may name")                                                  \
  X(kMaxLostAttempts, "max_lost_attempts", "--max-lost-attempts", "attempts", 3, 1, 100, kAborted,                  \
    kAttemptsExhausted, "3", "Attempts of a job its worker may lose (crash, kill, lost lease) before it fails")     \
  X(kMaxRawValues, "max_raw_values", "--max-raw-values", "values", 134217728, 1, 1099511627776.0,                   \
    kResourceExhausted, kRequestTooLarge, "2^27", "Most per-sample values a job may keep (return_raw_samples)")     \
  X(kMaxTextSamples, "max_text_samples", "", "samples", 65536, 65536, 65536, kResourceExhausted, kRequestTooLarge,  \
    "65,536", "Most samples of a job's text input")                                                                 \
  X(kMaxTextDocuments, "max_text_documents", "", "documents", 4096, 4096, 4096, kResourceExhausted,                 \
    kRequestTooLarge, "4,096", "Most documents per sample of a job's text input")                                   \
  X(kMaxDocumentBytes, "max_document_bytes", "", "bytes", 1048576, 1048576, 1048576, kResourceExhausted,            \
    kRequestTooLarge, "1 MiB", "Largest document of a job's text input")                                            \
  X(kMaxTextBytes, "max_text_bytes", "", "bytes", 16777216, 16777216, 16777216, kResourceExhausted,                 \
    kRequestTooLarge, "16 MiB", "Largest text input of a job, all documents together")                              \
  X(kMaxResultPageBytes, "max_result_page_bytes", "", "bytes", 4194304, 4194304, 4194304, kResourceExhausted,       \
    kRequestTooLarge, "4 MiB", "Largest GetJobResult page (any gRPC client's default receive size)")               \
  X(kRetentionHours, "retention_hours", "--retention-hours", "hours", 168, 0.001, 1000000, kNotFound, kJobNotFound,  \
    "7 d", "Finished jobs are deleted after this")                                                                  \
  X(kMaxLabels, "max_labels", "", "labels", 32, 32, 32, kInvalidArgument, kInvalidArgument, "32",                   \
    "Most labels of a job or model")

enum class Limit {
#define POSBIAS_LIMIT_ENUMERATOR(id, ...) id,
  POSBIAS_LIMITS(POSBIAS_LIMIT_ENUMERATOR)
#undef POSBIAS_LIMIT_ENUMERATOR
};

struct LimitSpec {
  Limit id;
  std::string_view name;  // snake_case, as the start-up log spells it.
  std::string_view flag;  // "--max-points"; "" for a fixed limit.
  std::string_view unit;  // What the number counts: "points", "bytes", "MiB", "seconds", ...
  double default_value;
  double lowest, highest;  // What an operator may set the flag to (the default, for a fixed limit).
  absl::StatusCode code;   // What a client past the limit gets.
  ErrorReason reason;      // kInternalError: gRPC's own status, without a posbias reason.
  std::string_view shown;  // The default as the docs write it ("1,000,000", "64 MiB", "2^27", "1 h").
  std::string_view help;   // The flag's help text.

  bool fixed() const { return flag.empty(); }
};

inline constexpr LimitSpec kLimits[] = {
#define POSBIAS_LIMIT_ROW(id, name, flag, unit, value, lowest, highest, code, reason, shown, help) \
  {Limit::id, name, flag, unit, value, lowest, highest, absl::StatusCode::code, ErrorReason::reason, shown, help},
    POSBIAS_LIMITS(POSBIAS_LIMIT_ROW)
#undef POSBIAS_LIMIT_ROW
};

constexpr const LimitSpec& Spec(Limit id) { return kLimits[static_cast<int>(id)]; }

// The default, in the type of the option it sets.
template <typename T>
constexpr T Default(Limit id) {
  return static_cast<T>(Spec(id).default_value);
}

// One tenant's part of a server-wide limit under --tenant-share: floor(limit * share), at least 1.
inline int64_t TenantShare(int64_t limit, double share) {
  const auto part = static_cast<int64_t>(static_cast<double>(limit) * share);
  return part < 1 ? 1 : part;
}

// The flag's environment variable: "--max-points" -> "POSBIAS_MAX_POINTS" ("" when fixed).
std::string EnvironmentVariable(const LimitSpec& limit);

// A number as the docs and messages write it: "1,000,000", "4e9" (beyond 10^9 when round), "0.5".
std::string FormatNumber(double value);

// The `allowed` text of a refusal at `value` (the configured limit, in the limit's unit), in plain
// digits as the flag takes them: "at most 1000000 points (--max-points)"; a fixed limit names no
// flag.
std::string Allowed(Limit id, double value);
inline std::string Allowed(Limit id) { return Allowed(id, Spec(id).default_value); }

// The `allowed` text of a range up to the limit: "1..65536 samples", "1..131072 positions
// (--max-sequence-length)".
std::string Range(Limit id, double lowest, double value);

// Reads a `shown` text back as a number in the limit's unit ("1,000,000", "4e9", "2^27",
// "64 MiB" for bytes or MiB, "1 h" / "60 s" for seconds); false when it does not read.
bool ReadShown(std::string_view text, std::string_view unit, double* value);

}  // namespace posbias::limits
