#include "server/registry/model_index.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::registry {
namespace fs = std::filesystem;
namespace {

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <typename T>
void PutOptional(nlohmann::json& json, const char* key, const std::optional<T>& value) {
  if (value) json[key] = *value;
}
template <typename T>
void GetOptional(const nlohmann::json& json, const char* key, std::optional<T>& value) {
  if (json.contains(key)) value = json.at(key).get<T>();
}

nlohmann::json SourceToJson(const ModelSource& source) {
  nlohmann::json overrides = nlohmann::json::object();
  const auto& o = source.overrides;
  PutOptional(overrides, "num_layers", o.num_layers);
  PutOptional(overrides, "hidden_size", o.hidden_size);
  PutOptional(overrides, "num_heads", o.num_heads);
  PutOptional(overrides, "num_kv_heads", o.num_kv_heads);
  PutOptional(overrides, "intermediate_size", o.intermediate_size);
  PutOptional(overrides, "vocab_size", o.vocab_size);
  PutOptional(overrides, "max_positions", o.max_positions);
  PutOptional(overrides, "rope_theta", o.rope_theta);
  PutOptional(overrides, "cesaro_alpha", o.cesaro_alpha);
  PutOptional(overrides, "tie_embeddings", o.tie_embeddings);
  PutOptional(overrides, "initializer_range", o.initializer_range);
  PutOptional(overrides, "sliding_window", o.sliding_window);
  return {{"kind", SourceKindName(source.kind)}, {"preset", source.preset}, {"overrides", overrides},
          {"no_position_encoding", source.ablations.no_position_encoding},
          {"uniform_attention", source.ablations.uniform_attention}, {"no_mlp", source.ablations.no_mlp},
          {"seed", source.seed}, {"path", source.path}, {"width", source.width},
          {"tokenizer_path", source.tokenizer_path}};
}

ModelSource SourceFromJson(const nlohmann::json& json) {
  ModelSource source;
  auto kind = ParseSourceKind(json.at("kind").get<std::string>());
  if (!kind.ok()) throw std::invalid_argument("unknown source kind " + json.at("kind").get<std::string>());
  source.kind = *kind;
  source.preset = json.value("preset", "");
  const auto& o = json.at("overrides");
  GetOptional(o, "num_layers", source.overrides.num_layers);
  GetOptional(o, "hidden_size", source.overrides.hidden_size);
  GetOptional(o, "num_heads", source.overrides.num_heads);
  GetOptional(o, "num_kv_heads", source.overrides.num_kv_heads);
  GetOptional(o, "intermediate_size", source.overrides.intermediate_size);
  GetOptional(o, "vocab_size", source.overrides.vocab_size);
  GetOptional(o, "max_positions", source.overrides.max_positions);
  GetOptional(o, "rope_theta", source.overrides.rope_theta);
  GetOptional(o, "cesaro_alpha", source.overrides.cesaro_alpha);
  GetOptional(o, "tie_embeddings", source.overrides.tie_embeddings);
  GetOptional(o, "initializer_range", source.overrides.initializer_range);
  GetOptional(o, "sliding_window", source.overrides.sliding_window);
  source.ablations.no_position_encoding = json.value("no_position_encoding", false);
  source.ablations.uniform_attention = json.value("uniform_attention", false);
  source.ablations.no_mlp = json.value("no_mlp", false);
  source.seed = json.value("seed", uint64_t{0});
  source.path = json.value("path", "");
  source.width = json.value("width", int64_t{0});
  source.tokenizer_path = json.value("tokenizer_path", "");
  return source;
}

}  // namespace

ModelIndex::Lock::Lock(const fs::path& lock_file)
    : fd_(::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
  if (fd_ >= 0) {
    while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
    }
  }
}

ModelIndex::Lock::~Lock() {
  if (fd_ >= 0) ::close(fd_);  // Closing releases the lock.
}

ModelIndex::ModelIndex(const std::string& data_dir)
    : file_(fs::path(data_dir) / "models.json"), lock_file_(fs::path(data_dir) / "models.json.lock") {}

absl::StatusOr<nlohmann::json> ModelIndex::Read() const {
  if (!fs::exists(file_)) return nlohmann::json::array();
  auto json = nlohmann::json::parse(ReadFile(file_), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_array()) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, ErrorReason::kInternalError, file_.string() + " is not a JSON array");
  }
  return json;
}

std::optional<nlohmann::json> ModelIndex::ReadIfChanged(bool force) {
  std::error_code error;
  const auto mtime = fs::last_write_time(file_, error);
  const auto size = error ? std::uintmax_t{0} : fs::file_size(file_, error);
  if (error || (!force && mtime == seen_mtime_ && size == seen_size_)) return std::nullopt;
  auto json = nlohmann::json::parse(ReadFile(file_), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_array()) return std::nullopt;  // Mid-replacement or damaged.
  seen_mtime_ = mtime;
  seen_size_ = size;
  return json;
}

namespace {

// A full disk is the operator's to fix (RESOURCE_EXHAUSTED / INSUFFICIENT_STORAGE); the message
// names the file within the data directory only, not the server's paths.
absl::Status WriteError(const std::string& what, const fs::path& path) {
  const int error = errno;
  const std::string message =
      absl::StrCat("cannot ", what, " the model index (", path.filename().string(), "): ", std::strerror(error));
  if (error == ENOSPC || error == EDQUOT) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                           message + "; the data directory's disk is full, nothing was registered");
  }
  return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError, message);
}

}  // namespace

// Writes `text` to `path` and flushes it to the disk; every call's result is checked.
absl::Status WriteDurably(const fs::path& path, const std::string& text) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return WriteError("create", path);
  for (size_t written = 0; written < text.size();) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const absl::Status status = WriteError("write", path);
      ::close(fd);
      return status;
    }
    written += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    const absl::Status status = WriteError("flush", path);
    ::close(fd);
    return status;
  }
  if (::close(fd) != 0) return WriteError("close", path);
  return absl::OkStatus();
}

// Makes a rename in `directory` durable.
void SyncDirectory(const fs::path& directory) {
  const int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)::fsync(fd);
  ::close(fd);
}


absl::Status ModelIndex::Write(const nlohmann::json& items) {
  // A name of this process's own: replicas sharing the directory never write the same file. The
  // new index is on the disk before it replaces the old one, and the rename is made durable.
  static std::atomic<int64_t> writes{0};
  const fs::path temporary = absl::StrCat(file_.string(), ".tmp.", getpid(), ".", writes++);
  if (auto status = WriteDurably(temporary, items.dump(2) + "\n"); !status.ok()) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    return status;
  }
  std::error_code error;
  fs::rename(temporary, file_, error);
  if (error) {
    fs::remove(temporary, error);
    return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError, "cannot replace " + file_.string());
  }
  SyncDirectory(file_.parent_path());
  // What we just wrote needs no re-reading.
  seen_mtime_ = fs::last_write_time(file_, error);
  seen_size_ = error ? 0 : fs::file_size(file_, error);
  return absl::OkStatus();
}

int64_t ModelIndex::RemoveTemporaries() const {
  const std::string prefix = file_.filename().string() + ".tmp.";
  int64_t removed = 0;
  std::error_code error;
  for (fs::directory_iterator it(file_.parent_path(), error), end; !error && it != end; it.increment(error)) {
    if (it->path().filename().string().rfind(prefix, 0) != 0) continue;
    std::error_code ignored;
    removed += fs::remove(it->path(), ignored) ? 1 : 0;
  }
  return removed;
}

nlohmann::json ItemFromEntry(const ModelEntry& entry, const std::string& owner_token) {
  nlohmann::json item = {{"name", entry.name}, {"uid", entry.uid}, {"generation", entry.generation},
                         {"source", SourceToJson(entry.source)},
                         {"state", ModelStateName(entry.state)}, {"created_ms", entry.created_ms},
                         {"labels", entry.labels}, {"request_id", entry.request_id}};
  if (!entry.tenant.empty()) item["tenant"] = entry.tenant;
  if (entry.state == ModelState::kLoading) {
    item["owner"] = owner_token;
    item["loading_expires_ms"] = entry.reserved_until_ms;
  } else {
    item.update({{"error_reason", entry.error_reason}, {"error_message", entry.error_message},
                 {"init_recipe", entry.init_recipe}, {"weights_sha256", entry.weights_sha256},
                 {"weights_sha256_of", entry.stream_digest ? "upload stream" : "float32 export"},
                 {"parameters", entry.parameters}, {"memory_bytes", entry.memory_bytes}});
    if (entry.trained_recall) item["trained_recall"] = recall::MqarTaskJson(*entry.trained_recall);
  }
  return item;
}

absl::StatusOr<ModelEntry> EntryFromItem(const nlohmann::json& item) {
  try {
    ModelEntry entry;
    entry.name = item.at("name");
    entry.uid = item.value("uid", "");  // "" only in an index older than uids (Open migrates it).
    entry.generation = item.value("generation", int64_t{1});
    const std::string state = item.value("state", "ready");
    entry.state = state == "failed" ? ModelState::kFailed : state == "loading" ? ModelState::kLoading : ModelState::kReady;
    if (entry.state == ModelState::kLoading) {  // A reservation: a registration in progress.
      entry.reserved_by = item.value("owner", "");
      entry.reserved_until_ms = item.value("loading_expires_ms", int64_t{0});
    }
    entry.source = SourceFromJson(item.at("source"));
    entry.error_reason = item.value("error_reason", "");
    entry.error_message = item.value("error_message", "");
    entry.init_recipe = item.value("init_recipe", "");
    entry.weights_sha256 = item.value("weights_sha256", "");
    // Before "weights_sha256_of", an upload's digest was its stream's; every other the export's.
    entry.stream_digest = entry.source.kind == SourceKind::kUpload
                              ? item.value("weights_sha256_of", "upload stream") == "upload stream"
                              : false;
    entry.parameters = item.value("parameters", int64_t{0});
    entry.memory_bytes = item.value("memory_bytes", int64_t{0});
    entry.created_ms = item.value("created_ms", int64_t{0});
    entry.labels = item.value("labels", std::map<std::string, std::string>{});
    entry.request_id = item.value("request_id", "");
    entry.tenant = item.value("tenant", "");
    if (auto it = item.find("trained_recall"); it != item.end()) entry.trained_recall = recall::MqarFromTaskJson(*it);
    return entry;
  } catch (const std::exception& e) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, ErrorReason::kInternalError,
                           absl::StrCat("models.json: malformed entry: ", e.what()));
  }
}

}  // namespace posbias::registry
