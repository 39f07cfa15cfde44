// The model registry: named models a job can measure. Built-in presets are always there; users
// register a preset with overrides and a seed, a Hugging Face checkpoint or a TorchScript file under
// the server's model root, or an uploaded safetensors checkpoint. Registrations persist in
// <data_dir>/models.json; loaded models are cached within a memory budget (least recently used
// first out, reloaded on demand).
//
// Model states: LOADING only while a registration builds or loads it; then READY, or FAILED with a
// reason (a registration that fails stays listed as FAILED so the user sees why; a cache reload
// that fails turns READY into FAILED). Nothing stays LOADING: a restart re-reads models.json, where
// only READY and FAILED are written.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json_fwd.hpp"
#include "server/models/config.h"
#include "server/models/model.h"

namespace posbias::registry {

enum class ModelState { kLoading, kReady, kFailed };
std::string ModelStateName(ModelState state);

struct ModelSource {
  std::string kind;       // "preset" | "checkpoint" | "torchscript" | "upload"
  std::string preset;     // preset: its name (or family base "gpt2" / "qwen2" / "cesaro").
  models::ConfigOverrides overrides;
  models::Ablations ablations;
  uint64_t seed = 0;
  std::string path;       // checkpoint / torchscript: relative to the model root; upload: stored file.
  int64_t width = 0;      // torchscript: embedding width d.
};

struct ModelEntry {
  std::string name;
  bool builtin = false;
  ModelSource source;
  models::ModelConfig config;
  ModelState state = ModelState::kLoading;
  std::string error_reason, error_message;
  std::string init_recipe;
  std::string weights_sha256;  // SHA-256 of the exported F32 safetensors bytes ("" until computed).
  int64_t parameters = 0;
  int64_t memory_bytes = 0;
  int64_t created_ms = 0;
  std::map<std::string, std::string> labels;
  std::string request_id;
  // Another replica's registration still loading, as read from the shared index: its owner (a
  // process token) and when the reservation lapses if that replica died (Unix ms). Empty / 0 for
  // this process's own entries.
  std::string reserved_by;
  int64_t reserved_until_ms = 0;
};

class ModelRegistry {
 public:
  struct Options {
    std::string model_root;                          // Checkpoints and TorchScript files live here.
    std::string data_dir;                            // models.json and uploads/.
    int64_t cache_budget_bytes = int64_t{8} << 30;   // Loaded parameters kept in memory.
    std::function<void(double)> on_load = nullptr;   // Seconds each build/load took (metrics).
  };

  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Open(const Options& options);

  // Registers (and loads, to check it) a model. A name that exists is MODEL_ALREADY_EXISTS unless
  // the same non-empty request_id registered it (then that entry is returned).
  absl::StatusOr<ModelEntry> Register(const std::string& name, const ModelSource& source,
                                      const std::map<std::string, std::string>& labels,
                                      const std::string& request_id);
  // Registers an uploaded checkpoint: `staged_path` (a file the caller wrote under
  // <data_dir>/uploads/) becomes the model's weights; `config_json` is its Hugging Face config.
  absl::StatusOr<ModelEntry> RegisterUpload(const std::string& name, const std::string& staged_path,
                                            const std::string& config_json,
                                            const std::map<std::string, std::string>& labels,
                                            const std::string& request_id);

  absl::StatusOr<ModelEntry> Get(const std::string& name);
  std::vector<ModelEntry> List();
  // MODEL_BUILTIN for a preset; MODEL_IN_USE when active_jobs > 0 and not force.
  absl::Status Delete(const std::string& name, bool force, int64_t active_jobs);

  // The loaded model (cached; loaded on demand). Callers hold the shared_ptr while measuring; a
  // model in use is never evicted.
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> Acquire(const std::string& name);

  // Writes the model's weights (Hugging Face names, F32) to `path`.
  absl::Status Export(const std::string& name, const std::string& path);

  // Resolves `relative` under the model root: no absolute paths, no escaping through "..", no
  // symlinks leading out (PATH_NOT_ALLOWED); PATH_NOT_FOUND when it does not exist.
  absl::StatusOr<std::string> ResolveUnderRoot(const std::string& relative) const;

  std::string uploads_dir() const;
  // Models built or loaded so far (cache misses), for tests and metrics.
  int64_t loads() const { return loads_; }

 private:
  explicit ModelRegistry(Options options) : options_(std::move(options)) {}
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> Load(const ModelEntry& entry);
  absl::StatusOr<std::shared_ptr<models::DecoderModel>> LoadUntimed(const ModelEntry& entry);
  void Touch(const std::string& name, std::shared_ptr<models::DecoderModel> model);
  // Writes models.json (merging what other replicas wrote first, unless told not to), under the
  // index lock: replicas sharing the data directory take turns at the read-merge-write, so none
  // overwrites another's registration. Caller holds mutex_.
  absl::Status Persist(bool merge_from_disk = true);
  absl::Status PersistUnderIndexLock(bool merge_from_disk);  // Caller holds mutex_ and the index lock.
  // Adds the entries of <data_dir>/models.json this process does not know (written by another
  // replica sharing the data directory). Caller holds mutex_ (or is Open).
  absl::Status MergeIndexFromDisk();
  absl::Status MergeIndex(const nlohmann::json& index);  // `index`: the parsed models.json array.
  // When models.json changed since this process last read or wrote it (another replica registered
  // or deleted a model): adds the new entries and drops the deleted ones. Caller holds mutex_.
  void SyncIndexIfChanged(bool force = false);
  absl::StatusOr<ModelEntry> Finish(ModelEntry entry);
  // Reserves `name` for `entry` (LOADING); the existing entry when the same request_id made it;
  // MODEL_ALREADY_EXISTS otherwise.
  absl::StatusOr<std::optional<ModelEntry>> Reserve(const std::string& name, ModelEntry& entry,
                                                    const std::map<std::string, std::string>& labels,
                                                    const std::string& request_id);

  Options options_;
  std::mutex mutex_;
  std::map<std::string, ModelEntry> entries_;
  std::filesystem::file_time_type index_mtime_{};  // models.json as last read or written.
  std::string owner_token_;  // host:pid:random, marks this process's reservations in the index.
  std::uintmax_t index_size_ = 0;
  // LRU cache: most recent at the front.
  std::list<std::pair<std::string, std::shared_ptr<models::DecoderModel>>> cache_;
  std::atomic<int64_t> loads_{0};
};

// Checks a model name: [a-z0-9][a-z0-9-]{0,62}.
absl::Status CheckModelName(const std::string& name);

// SHA-256 over bytes fed in pieces (uploads are hashed while they arrive).
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void Update(const char* data, size_t size);
  std::string HexDigest();  // Once, at the end.

 private:
  void* context_;  // EVP_MD_CTX.
};

// Hex SHA-256 of a file's bytes.
absl::StatusOr<std::string> Sha256OfFile(const std::string& path);

}  // namespace posbias::registry
