// The door between the torch-free catalog and the models in memory: the catalog resolves an entry
// into a LoadRequest (architecture, seed, absolute weights path) and a ModelLoader builds or loads
// it. The server's loader is the torch-side ModelCache (model_cache.h), which also keeps loaded
// models for the jobs that follow; tests may give the catalog any other.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "server/files/open_beneath.h"
#include "server/models/config.h"
#include "server/registry/model_entry.h"

namespace posbias::registry {

struct LoadRequest {
  std::string name;  // The model's path in the catalog (ModelPath: "name" or "tenant/name").
  SourceKind kind = SourceKind::kPreset;
  models::ModelConfig config;  // Resolved (presets, overrides, config.json); kTorchScript: width only.
  uint64_t seed = 0;           // Of the initialization (weights, if any, replace it).
  std::string weights_path;    // Absolute: checkpoint file or directory, upload, TorchScript file; "" = seeded init.
  files::Scope scope;          // Where the weights' files may be opened (files/open_beneath.h).
  // The digest the registration recorded (ModelEntry::weights_sha256): a load that reads files
  // (checkpoint, upload) and finds other weights fails with MODEL_CHANGED naming both digests.
  // "" = nothing to check (a registration's first load, a preset, a TorchScript file).
  std::string weights_sha256;
};

// What a load found out about the model.
struct LoadedModel {
  models::ModelConfig config;  // As built (TorchScript: as declared).
  int64_t parameters = 0;
  std::string init_recipe;     // The seeded initialization's recipe, in words.
  // SHA-256 of the canonical float32 safetensors file of the parameters as loaded (what
  // ExportModel sends by default, models::StreamWeights); "" for TorchScript and the Cesaro model.
  std::string weights_sha256;
};

// True once the caller went away (a cancelled RPC): a loader stops waiting and writing, and returns
// CANCELLED. An empty function is a caller that stays.
using Cancelled = std::function<bool()>;

class ModelLoader {
 public:
  virtual ~ModelLoader() = default;
  // Builds or loads the model (and may keep it for later use), with the digest of its weights.
  // Stops with CANCELLED once `cancelled` says the caller went away (headers and tensors ask it).
  virtual absl::StatusOr<LoadedModel> Load(const LoadRequest& request, const Cancelled& cancelled = nullptr) = 0;
  // Writes the model's weights (Hugging Face names, F32 safetensors) to `path`.
  virtual absl::Status Export(const LoadRequest& request, const std::string& path, const Cancelled& cancelled) = 0;
  // The model at `path` (LoadRequest::name) was deleted or replaced: drop anything kept of it.
  virtual void Forget(const std::string& path) = 0;
};

}  // namespace posbias::registry
