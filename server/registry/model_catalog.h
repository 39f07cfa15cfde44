// The model catalog: named models a job can measure, torch-free. Built-in presets are always
// there; users register a preset with overrides and a seed, a Hugging Face checkpoint or a
// TorchScript file under the server's model root, or an uploaded safetensors checkpoint.
// Registrations persist in the shared index <data_dir>/models.json (model_index.h), where replicas
// sharing the data directory see each other's registrations, deletions and reservations.
//
// The catalog resolves an entry into a LoadRequest; a ModelLoader it is given (model_loader.h: the
// server's is the torch-side ModelCache) builds or loads the model. A registration loads once, to
// check the model and learn its size, before it is READY.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/files/open_beneath.h"
#include "server/registry/model_entry.h"
#include "server/registry/model_index.h"
#include "server/registry/model_loader.h"
#include "server/registry/scratch_files.h"

namespace posbias::registry {

class ModelCatalog {
 public:
  struct Options {
    std::string model_root;  // Checkpoints and TorchScript files live here ("" = none allowed).
    std::string data_dir;    // models.json and uploads/.
    // TorchScript files run code when loaded: registering or loading one is refused
    // (FAILED_PRECONDITION / TORCHSCRIPT_DISABLED) unless the operator allows it.
    bool allow_torchscript = false;
    // The model cache's budget (--model-cache-mb): a model whose float32 parameters alone exceed
    // it is refused at registration (RESOURCE_EXHAUSTED / INSUFFICIENT_MEMORY), as one that
    // exceeds the host's memory is. 0 = no such limit.
    int64_t max_model_bytes = 0;
  };

  // `loader` outlives the catalog.
  static absl::StatusOr<std::unique_ptr<ModelCatalog>> Open(const Options& options, ModelLoader* loader);

  // Namespaces: a model name is unique within its tenant's namespace (`tenant`, its models'
  // ModelEntry::tenant) or the public one (tenant ""): built-in presets and what an admin or a
  // server without authentication registers, visible to every tenant. A tenant may not take a
  // public name, nor an admin a name some tenant uses, so the names one caller sees are unique.
  // The catalog keys entries by ModelPath (model_entry.h): "name" or "tenant/name".
  //
  // Registers (and loads, to check it) a model in `tenant`'s namespace. A name taken there, or
  // public, is MODEL_ALREADY_EXISTS unless the same non-empty request_id registered it in the same
  // namespace (then that entry is returned). A registration that fails leaves nothing: the name
  // stays free and an uploaded file is removed.
  absl::StatusOr<ModelEntry> Register(const std::string& name, const ModelSource& source,
                                      const std::map<std::string, std::string>& labels,
                                      const std::string& request_id, const std::string& tenant = "",
                                      const Cancelled& stop = nullptr);
  // Registers an uploaded checkpoint: `staged_path` (a file the caller wrote under uploads_dir())
  // becomes the model's weights; `config_json` is its Hugging Face config, `ablations` applied on top.
  absl::StatusOr<ModelEntry> RegisterUpload(const std::string& name, const std::string& staged_path,
                                            const std::string& config_json, const models::Ablations& ablations,
                                            const std::map<std::string, std::string>& labels,
                                            const std::string& request_id, const std::string& tenant = "",
                                            const Cancelled& stop = nullptr);

  // The model at `path` (ModelPath: "name" public, "tenant/name" a tenant's); MODEL_NOT_FOUND.
  absl::StatusOr<ModelEntry> Get(const std::string& path);
  // What `name` means to a caller whose own namespace is `tenant` ("" = public only, an admin's):
  // a bare name is the tenant's model of that name, else the public one; "tenant/name" is that
  // path (whether the caller may see it is the caller's check). MODEL_NOT_FOUND.
  absl::StatusOr<ModelEntry> Find(const std::string& name, const std::string& tenant);
  // The registration `uid` if it still has weights `weights_sha256` (what a job recorded at
  // submission; "" = not recorded, not checked). A job recorded before uids is found by `name` as
  // its `tenant` saw it. Gone: FAILED_PRECONDITION with MODEL_NOT_FOUND; the name registered
  // again (another uid) or other weights: FAILED_PRECONDITION with MODEL_CHANGED. A job bound to
  // a model never runs on another one, in another tenant's namespace neither.
  absl::StatusOr<ModelEntry> GetBound(const std::string& uid, const std::string& weights_sha256,
                                      const std::string& name, const std::string& tenant);
  std::vector<ModelEntry> List();  // Sorted by path.
  // MODEL_BUILTIN for a preset; MODEL_IN_USE when active_jobs > 0 and not force.
  absl::Status Delete(const std::string& path, bool force, int64_t active_jobs);

  // What the loader needs to build the model at `path`: MODEL_NOT_FOUND, or MODEL_NOT_READY for a
  // failed model or another replica's registration in progress. LoadRequest::name is the path.
  absl::StatusOr<LoadRequest> RequestFor(const std::string& path);
  // A load outside registration (a cache reload) failed: the model becomes FAILED with the reason.
  void RecordLoadFailure(const std::string& path, const absl::Status& status);
  // A load outside registration learned the model's size (entries read from an older index).
  void RecordLoaded(const std::string& path, const LoadedModel& loaded);

  // Writes the model's weights (Hugging Face names, F32) to `path`; read-only (the recorded digest
  // and generation stay). Stops with CANCELLED once `cancelled` says the caller went away.
  absl::Status Export(const std::string& model_path, const std::string& file, const Cancelled& cancelled = nullptr);

  // Resolves `relative` under the scope of `tenant`: <model root>/<tenant>/ for a tenant's model;
  // for a public one (tenant "", an admin's) `relative` is relative to the whole root and its
  // scope is WallFolder's. No absolute paths, no escaping through "..", no symlinks leading out
  // and no dangling ones (PATH_NOT_ALLOWED, the same text whether or not anything exists there);
  // PATH_NOT_FOUND when it does not exist inside the scope.
  absl::StatusOr<std::string> ResolveUnderRoot(const std::string& relative, const std::string& tenant = "") const;
  // The folder of the model root whose wall a path lies behind: the tenant's own for a tenant's
  // model; for a public model, the root's folder the path begins with (files under <root>/lab-b/
  // are lab-b's to write, so whoever registers them, they are opened with lab-b's scope); "" for
  // a path naming a file directly in the root (the whole root is the scope).
  std::string WallFolder(const std::string& relative, const std::string& tenant) const;
  // Where the files of an entry with `source` owned by `tenant` may be opened (files/open_beneath.h):
  // the wall folder of its path (WallFolder), the data directory's uploads for an upload.
  // FAILED_PRECONDITION when that folder does not exist.
  absl::StatusOr<files::Scope> ScopeFor(const ModelSource& source, const std::string& tenant) const;
  // The entry's tokenizer directory: a checkpoint's own, or a preset's tokenizer_path; "" = none.
  std::string TokenizerDirOf(const ModelEntry& entry, const std::string& weights_path) const;

  std::string uploads_dir() const;

  // What Open removed of what dead processes left behind (kill -9 mid-write): temporary copies of
  // models.json, stale scratch files (scratch_files.h) and uploaded weights no index item names.
  struct Leftovers {
    int64_t index_temporaries = 0;
    ScratchSweep scratch;
  };
  const Leftovers& leftovers() const { return leftovers_; }
  // Scratch files of other hosts (or of an older naming) untouched this long are stale.
  static constexpr std::chrono::hours kScratchMaxAge{24};

 private:
  ModelCatalog(Options options, ModelLoader* loader);
  absl::StatusOr<LoadRequest> RequestForEntry(const ModelEntry& entry) const;
  absl::Status CheckSourceAllowed(const ModelSource& source) const;
  // Registration's second half: loads the reserved entry and records READY or FAILED.
  // `stop` ends the load (headers, tensors, the digest) with CANCELLED once the caller went away.
  absl::StatusOr<ModelEntry> Finish(ModelEntry entry, const Cancelled& stop);
  // Reserves `name` in entry.tenant's namespace for `entry` (LOADING); the existing entry when the
  // same request_id made it; MODEL_ALREADY_EXISTS when the name is taken there or clashes across
  // namespaces (see Register).
  absl::StatusOr<std::optional<ModelEntry>> Reserve(const std::string& name, ModelEntry& entry,
                                                    const std::map<std::string, std::string>& labels,
                                                    const std::string& request_id);
  // Writes the index (merging what other replicas wrote first, unless told not to), under the
  // index lock. Caller holds mutex_.
  absl::Status Persist(bool merge_from_disk = true);
  absl::Status PersistUnderIndexLock(bool merge_from_disk);  // Caller holds mutex_ and the index lock.
  // Adds the index's entries this process does not know (written by another replica). Caller
  // holds mutex_ (or is Open).
  absl::Status MergeIndex(const nlohmann::json& items);
  absl::Status MergeIndexFromDisk();
  // Gives every index item of an older server (registered before uids) a uid, under the index
  // lock, so that every replica reads the same one.
  absl::Status MigrateIndex();
  Leftovers RemoveLeftovers();  // Under the index lock.
  static void RemoveUploadedFiles(const std::string& weights_path);  // The weights and their config.json.
  // A registration refused: it leaves nothing behind, not the name (the caller may correct the
  // request and use it again), not an uploaded file (FAILED is left to models whose later reload
  // fails). Returns `why`.
  absl::Status Refuse(const ModelEntry& entry, const absl::Status& why);
  // When the index changed since this process last read or wrote it: adds the new entries and
  // drops the deleted ones. Caller holds mutex_.
  void SyncIndexIfChanged(bool force = false);

  Options options_;
  ModelLoader* loader_;
  ModelIndex index_;
  std::mutex mutex_;
  std::map<std::string, ModelEntry> entries_;  // By ModelPath.
  std::string owner_token_;  // host:pid:random, marks this process's reservations in the index.
  Leftovers leftovers_;
};

}  // namespace posbias::registry
