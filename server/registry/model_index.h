// The shared index of registered models: <data_dir>/models.json, a JSON array of entries, read and
// written by every replica that shares the data directory. This file is its one reader and writer:
// the keys of an index item are spelled here only (ItemFromEntry / EntryFromItem).
//
// Replicas take turns at a read-merge-write under an exclusive advisory lock (flock) on
// models.json.lock; what to merge is the catalog's policy (model_catalog.cc). A write goes to a
// temporary file of this process's own and is renamed over models.json, so readers see the old
// index or the new one, never a torn one. Built-in presets are never written.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "server/registry/model_entry.h"

namespace posbias::registry {

class ModelIndex {
 public:
  explicit ModelIndex(const std::string& data_dir);

  // The exclusive lock for one read-merge-write. Best effort: where the file system has no locks,
  // the write goes on unlocked.
  class Lock {
   public:
    explicit Lock(const std::filesystem::path& lock_file);
    ~Lock();
    Lock(const Lock&) = delete;
    Lock& operator=(const Lock&) = delete;

   private:
    int fd_;
  };
  Lock Acquire() const { return Lock(lock_file_); }

  // The parsed array; an empty array when there is no index yet; DATA_LOSS when it is not an array.
  absl::StatusOr<nlohmann::json> Read() const;
  // The parsed array when models.json changed since this process last read or wrote it (or always
  // with `force`); nullopt when unchanged, missing, or mid-replacement (unparseable).
  std::optional<nlohmann::json> ReadIfChanged(bool force);
  // Replaces models.json with `items` (an array).
  absl::Status Write(const nlohmann::json& items);
  // Removes the temporary copies (models.json.tmp.*) of writers that died mid-write; the number
  // removed. Call under the lock: a live writer holds it while its copy exists.
  int64_t RemoveTemporaries() const;

  const std::filesystem::path& file() const { return file_; }

 private:
  std::filesystem::path file_, lock_file_;
  std::filesystem::file_time_type seen_mtime_{};  // models.json as last read or written.
  std::uintmax_t seen_size_ = 0;
};

// Writes `text` to `path` and flushes it to the disk, checking every call (RESOURCE_EXHAUSTED /
// INSUFFICIENT_STORAGE on a full disk). The registry's state files are written with it.
absl::Status WriteDurably(const std::filesystem::path& path, const std::string& text);
// Makes a rename in `directory` durable.
void SyncDirectory(const std::filesystem::path& directory);

// An entry as an index item. A LOADING entry is a reservation: `owner_token` names the process
// holding it (this process's token for its own registrations).
nlohmann::json ItemFromEntry(const ModelEntry& entry, const std::string& owner_token);
// An index item as an entry (its config is left to the catalog to resolve). A reservation gets its
// owner in reserved_by. DATA_LOSS naming the file when the item is malformed.
absl::StatusOr<ModelEntry> EntryFromItem(const nlohmann::json& item);

}  // namespace posbias::registry
