// What the registry knows about a named model, torch-free: where it comes from (its source), its
// architecture, its state and provenance. The catalog (model_catalog.h) keeps these entries; the
// loader (model_loader.h) turns one into a model in memory.
//
// Model states: LOADING only while a registration builds or loads it (and, in the shared index,
// while another replica does: a reservation); then READY, or FAILED with a reason (a registration
// that fails stays listed as FAILED so the user sees why; a cache reload that fails turns READY
// into FAILED). Nothing stays LOADING: a restart re-reads models.json, where a reservation lapses.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "server/files/open_beneath.h"
#include "absl/status/statusor.h"
#include "server/models/config.h"
#include "server/recall/mqar.h"

namespace posbias::registry {

enum class ModelState { kLoading, kReady, kFailed };
std::string ModelStateName(ModelState state);  // "loading" | "ready" | "failed"

// kPreset: a preset (or family base) with overrides and a seed; kCheckpoint: a Hugging Face
// checkpoint under the model root; kTorchScript: a TorchScript file under the model root;
// kUpload: an uploaded safetensors file with its config.json, stored in <data_dir>/uploads/.
enum class SourceKind { kPreset, kCheckpoint, kTorchScript, kUpload };
std::string_view SourceKindName(SourceKind kind);  // "preset" | "checkpoint" | "torchscript" | "upload"
absl::StatusOr<SourceKind> ParseSourceKind(std::string_view name);

struct ModelSource {
  SourceKind kind = SourceKind::kPreset;
  std::string preset;     // kPreset: its name (or family base "gpt2" / "qwen2" / "cesaro").
  models::ConfigOverrides overrides;
  models::Ablations ablations;
  uint64_t seed = 0;
  std::string path;       // kCheckpoint / kTorchScript: relative to the model root; kUpload: the stored file.
  int64_t width = 0;      // kTorchScript: embedding width d.
  // kPreset: a directory under the model root with tokenizer files, so that a seeded model takes
  // real text ("" = none). Its ids must be below the preset's vocab_size (checked per job).
  std::string tokenizer_path;
};

struct ModelEntry {
  std::string name;
  // The registration's identity (AIP-148): 32 hex digits from the OS CSPRNG, assigned when the
  // name is reserved and never reused; "preset-<name>" for a built-in preset. Jobs are bound to
  // it; uploads are stored under it.
  std::string uid;
  // Counts the changes of this registration's record (1 when reserved); a replica replaces its
  // copy of an entry when the index holds another uid or a higher generation.
  int64_t generation = 0;
  bool builtin = false;
  ModelSource source;
  models::ModelConfig config;
  ModelState state = ModelState::kLoading;
  std::string error_reason, error_message;
  std::string init_recipe;
  // SHA-256 of the canonical float32 safetensors file of the parameters as loaded at registration
  // (what ExportModel sends by default; "" until READY, for TorchScript and the Cesaro model).
  // Every later load that reads files checks it (model_loader.h, LoadRequest::weights_sha256).
  std::string weights_sha256;
  // An upload registered before the digest was taken from the parameters: weights_sha256 is then
  // its stream's digest, which loads cannot compare (models.json without "weights_sha256_of").
  bool stream_digest = false;
  // A checkpoint trained with posbias-train --task recall: the task its posbias_task.json
  // records (read at registration; recall jobs ask it by default).
  std::optional<recall::MqarOptions> trained_recall;
  int64_t parameters = 0;
  int64_t memory_bytes = 0;    // Float32 parameters in memory.
  int64_t created_ms = 0;
  std::map<std::string, std::string> labels;
  std::string request_id;
  // The tenant whose principals see it; "" = public (built-in presets, and what an admin or a
  // server without authentication registers), visible to every tenant.
  std::string tenant;
  // The checkpoint directory's tokenizer files (tokenizer.json, or vocab.json + merges.txt)
  // live here; "" = the model has no tokenizer (presets, uploads, TorchScript, bare files).
  std::string tokenizer_dir;
  // Where the tokenizer files may be opened (files/open_beneath.h): the tenant's folder of the model
  // root, the whole root for a public model. Not persisted: derived from the tenant.
  files::Scope tokenizer_scope;
  // Another replica's registration still loading, as read from the shared index: its owner (a
  // process token) and when the reservation lapses if that replica died (Unix ms). Empty / 0 for
  // this process's own entries.
  std::string reserved_by;
  int64_t reserved_until_ms = 0;
};

// Where a model lives in the catalog, and how any caller who sees it may address it: its name for
// a public model, "<tenant>/<name>" for a tenant's (tenant names have no '/', model names neither).
// A tenant's principals also address their own models by the bare name.
inline std::string ModelPath(const std::string& tenant, const std::string& name) {
  return tenant.empty() ? name : tenant + "/" + name;
}
inline std::string ModelPath(const ModelEntry& entry) { return ModelPath(entry.tenant, entry.name); }

// A new registration uid: 128 bits of getrandom(2), as 32 lowercase hex digits.
std::string NewModelUid();

// Checks a model name: [a-z0-9][a-z0-9-]{0,62}.
absl::Status CheckModelName(const std::string& name);

// Checks an uploaded checkpoint's Hugging Face config.json text: it parses and, with `ablations`,
// describes a model this server builds (INVALID_ARGUMENT naming what is wrong).
absl::Status CheckUploadConfig(const std::string& config_json, const models::Ablations& ablations);

}  // namespace posbias::registry
