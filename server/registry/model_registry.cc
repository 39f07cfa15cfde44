#include "server/registry/model_registry.h"

#include <fcntl.h>
#include <openssl/evp.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <set>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "server/models/weights.h"
#include "server/status/error.h"

namespace posbias::registry {
namespace fs = std::filesystem;
namespace {

// How long a registration's reservation of its name in the shared index holds when its replica
// dies before finishing (loading and hashing a checkpoint takes well under a minute).
constexpr int64_t kReservationMs = 15 * 60 * 1000;

std::string ProcessToken() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::random_device random;
  return absl::StrCat(host, ":", getpid(), ":", random());
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
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
  return {{"kind", source.kind}, {"preset", source.preset}, {"overrides", overrides},
          {"no_position_encoding", source.ablations.no_position_encoding},
          {"uniform_attention", source.ablations.uniform_attention}, {"no_mlp", source.ablations.no_mlp},
          {"seed", source.seed}, {"path", source.path}, {"width", source.width}};
}

ModelSource SourceFromJson(const nlohmann::json& json) {
  ModelSource source;
  source.kind = json.at("kind");
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
  source.ablations.no_position_encoding = json.value("no_position_encoding", false);
  source.ablations.uniform_attention = json.value("uniform_attention", false);
  source.ablations.no_mlp = json.value("no_mlp", false);
  source.seed = json.value("seed", uint64_t{0});
  source.path = json.value("path", "");
  source.width = json.value("width", int64_t{0});
  return source;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// The architecture a source describes (before loading anything big).
absl::StatusOr<models::ModelConfig> ResolveConfig(const ModelSource& source, const std::string& weights_path) {
  absl::StatusOr<models::ModelConfig> base;
  if (source.kind == "preset") {
    base = models::PresetConfig(source.preset);
    if (!base.ok()) base = models::FamilyConfig(source.preset);
  } else if (source.kind == "checkpoint" || source.kind == "upload") {
    const fs::path dir = fs::is_directory(weights_path) ? fs::path(weights_path) : fs::path(weights_path).parent_path();
    const fs::path config_json = source.kind == "upload" ? fs::path(weights_path + ".config.json") : dir / "config.json";
    if (!fs::is_regular_file(config_json)) {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, "INVALID_MODEL_FILE",
                             absl::StrCat("no config.json beside the checkpoint ", source.path,
                                          " (it defines the architecture)"));
    }
    base = models::ConfigFromHuggingFaceJson(ReadFile(config_json.string()));
  } else {
    models::ModelConfig config;
    config.family = models::Family::kTorchScript;
    config.hidden_size = source.width;
    return config;
  }
  if (!base.ok()) return base.status();
  models::ModelConfig config = models::ApplyOverrides(*base, source.overrides);
  config.ablations = source.ablations;
  if (auto status = models::ValidateConfig(config); !status.ok()) return status;
  return config;
}

}  // namespace

std::string ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kLoading: return "loading";
    case ModelState::kReady: return "ready";
    case ModelState::kFailed: return "failed";
  }
  return "unknown";
}

absl::Status CheckModelName(const std::string& name) {
  static const std::regex pattern("[a-z0-9][a-z0-9-]{0,62}");
  if (std::regex_match(name, pattern)) return absl::OkStatus();
  return InvalidArgumentError({"INVALID_ARGUMENT", "name", name.empty() ? "\"\"" : name,
                               "1..63 characters of [a-z0-9-], starting with a letter or digit"});
}

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  EVP_DigestInit_ex(static_cast<EVP_MD_CTX*>(context_), EVP_sha256(), nullptr);
}

Sha256::~Sha256() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(context_)); }

void Sha256::Update(const char* data, size_t size) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(context_), data, size);
}

std::string Sha256::HexDigest() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(context_), digest, &length);
  static const char* hex = "0123456789abcdef";
  std::string out;
  for (unsigned int i = 0; i < length; ++i) out += hex[digest[i] >> 4], out += hex[digest[i] & 15];
  return out;
}

absl::StatusOr<std::string> Sha256OfFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return ErrorWithReason(absl::StatusCode::kNotFound, "PATH_NOT_FOUND", "cannot read " + path);
  Sha256 sha;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    sha.Update(buffer.data(), static_cast<size_t>(in.gcount()));
  }
  return sha.HexDigest();
}

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Open(const Options& options) {
  std::error_code error;
  fs::create_directories(fs::path(options.data_dir) / "uploads", error);
  if (error) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "PATH_NOT_ALLOWED",
                           absl::StrCat("cannot create ", options.data_dir, "/uploads: ", error.message()));
  }
  std::unique_ptr<ModelRegistry> registry(new ModelRegistry(options));
  registry->owner_token_ = ProcessToken();
  for (const std::string& preset : models::PresetNames()) {
    ModelEntry entry;
    entry.name = preset;
    entry.builtin = true;
    entry.source.kind = "preset";
    entry.source.preset = preset;
    entry.config = *models::PresetConfig(preset);
    entry.state = ModelState::kReady;
    entry.init_recipe = "huggingface-" + models::FamilyName(entry.config.family) + ", seed 0";
    registry->entries_[preset] = entry;
  }
  if (auto status = registry->MergeIndexFromDisk(); !status.ok()) return status;
  return registry;
}

absl::Status ModelRegistry::MergeIndexFromDisk() {
  const fs::path file = fs::path(options_.data_dir) / "models.json";
  if (!fs::exists(file)) return absl::OkStatus();
  const auto json = nlohmann::json::parse(ReadFile(file.string()), nullptr, false);
  if (json.is_discarded() || !json.is_array()) {
    return ErrorWithReason(absl::StatusCode::kDataLoss, "INTERNAL_ERROR", file.string() + " is not a JSON array");
  }
  return MergeIndex(json);
}

absl::Status ModelRegistry::MergeIndex(const nlohmann::json& json) {
  const fs::path file = fs::path(options_.data_dir) / "models.json";
  for (const auto& item : json) {
    try {
      ModelEntry entry;
      entry.name = item.at("name");
      const std::string state = item.value("state", "ready");
      if (state == "loading") {  // A reservation: another replica's registration in progress.
        entry.reserved_by = item.value("owner", "");
        entry.reserved_until_ms = item.value("loading_expires_ms", int64_t{0});
        // Ours (dropped here since) or lapsed: not a reservation any more.
        if (entry.reserved_by == owner_token_ || entry.reserved_until_ms <= NowMs()) continue;
      }
      // What this process knows stays as it is, except another replica's reservation, which the
      // index's newer word (finished, failed, renewed) replaces.
      if (auto known = entries_.find(entry.name); known != entries_.end() && known->second.reserved_by.empty()) continue;
      entry.source = SourceFromJson(item.at("source"));
      entry.state = state == "failed" ? ModelState::kFailed : state == "loading" ? ModelState::kLoading : ModelState::kReady;
      entry.error_reason = item.value("error_reason", "");
      entry.error_message = item.value("error_message", "");
      entry.init_recipe = item.value("init_recipe", "");
      entry.weights_sha256 = item.value("weights_sha256", "");
      entry.parameters = item.value("parameters", int64_t{0});
      entry.memory_bytes = item.value("memory_bytes", int64_t{0});
      entry.created_ms = item.value("created_ms", int64_t{0});
      entry.labels = item.value("labels", std::map<std::string, std::string>{});
      entry.request_id = item.value("request_id", "");
      const std::string weights = entry.source.kind == "preset" ? "" :
          entry.source.kind == "upload" ? entry.source.path : ResolveUnderRoot(entry.source.path).value_or("");
      auto config = ResolveConfig(entry.source, weights);
      if (config.ok()) entry.config = *config;
      entries_[entry.name] = entry;
    } catch (const nlohmann::json::exception& e) {
      return ErrorWithReason(absl::StatusCode::kDataLoss, "INTERNAL_ERROR",
                             absl::StrCat(file.string(), ": malformed entry: ", e.what()));
    }
  }
  return absl::OkStatus();
}

void ModelRegistry::SyncIndexIfChanged(bool force) {
  const fs::path file = fs::path(options_.data_dir) / "models.json";
  std::error_code error;
  const auto mtime = fs::last_write_time(file, error);
  const auto size = error ? std::uintmax_t{0} : fs::file_size(file, error);
  if (error || (!force && mtime == index_mtime_ && size == index_size_)) return;
  const auto json = nlohmann::json::parse(ReadFile(file.string()), nullptr, false);
  if (json.is_discarded() || !json.is_array()) return;  // Mid-replacement or damaged: keep what we know.
  std::set<std::string> listed;
  for (const auto& item : json) {
    if (item.is_object() && item.contains("name") && item["name"].is_string()) listed.insert(item["name"].get<std::string>());
  }
  // Deleted by another replica: gone from the index (built-in presets and registrations still
  // loading here are not in it by design).
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool own_loading = it->second.state == ModelState::kLoading && it->second.reserved_by.empty();
    const bool keep = it->second.builtin || own_loading || listed.count(it->first) > 0;
    if (!keep) {
      const std::string name = it->first;
      cache_.remove_if([&](const auto& item) { return item.first == name; });
      it = entries_.erase(it);
    } else {
      ++it;
    }
  }
  (void)MergeIndex(json);
  index_mtime_ = mtime;
  index_size_ = size;
}

namespace {

// An exclusive advisory lock (flock) on <data_dir>/models.json.lock for one read-merge-write of the
// index: processes sharing the data directory (replicas on one volume) take turns. Best effort:
// where the file system has no locks, the write goes on unlocked, as before.
class IndexLock {
 public:
  explicit IndexLock(const fs::path& data_dir)
      : fd_(::open((data_dir / "models.json.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644)) {
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~IndexLock() {
    if (fd_ >= 0) ::close(fd_);  // Closing releases the lock.
  }
  IndexLock(const IndexLock&) = delete;
  IndexLock& operator=(const IndexLock&) = delete;

 private:
  int fd_;
};

}  // namespace

absl::Status ModelRegistry::Persist(bool merge_from_disk) {
  IndexLock lock(options_.data_dir);
  return PersistUnderIndexLock(merge_from_disk);
}

absl::Status ModelRegistry::PersistUnderIndexLock(bool merge_from_disk) {
  // Replicas sharing the data directory: keep what another process registered meanwhile.
  if (merge_from_disk) (void)MergeIndexFromDisk();
  nlohmann::json json = nlohmann::json::array();
  for (const auto& [name, entry] : entries_) {
    if (entry.builtin) continue;
    nlohmann::json item = {{"name", name}, {"source", SourceToJson(entry.source)},
                           {"state", ModelStateName(entry.state)}, {"created_ms", entry.created_ms},
                           {"labels", entry.labels}, {"request_id", entry.request_id}};
    if (entry.state == ModelState::kLoading) {
      // A reservation of the name while it loads (ours, or another replica's still valid), so
      // that no other replica registers the same name meanwhile.
      const bool ours = entry.reserved_by.empty();
      if (!ours && entry.reserved_until_ms <= NowMs()) continue;
      item["owner"] = ours ? owner_token_ : entry.reserved_by;
      item["loading_expires_ms"] = entry.reserved_until_ms;
    } else {
      item.update({{"error_reason", entry.error_reason}, {"error_message", entry.error_message},
                   {"init_recipe", entry.init_recipe}, {"weights_sha256", entry.weights_sha256},
                   {"parameters", entry.parameters}, {"memory_bytes", entry.memory_bytes}});
    }
    json.push_back(std::move(item));
  }
  const fs::path file = fs::path(options_.data_dir) / "models.json";
  // A name of this process's own: replicas sharing the directory never write the same file.
  static std::atomic<int64_t> writes{0};
  const fs::path temporary = absl::StrCat(file.string(), ".tmp.", getpid(), ".", writes++);
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << json.dump(2) << "\n";
    if (!out) return ErrorWithReason(absl::StatusCode::kInternal, "INTERNAL_ERROR", "cannot write " + temporary.string());
  }
  std::error_code error;
  fs::rename(temporary, file, error);
  if (error) {
    fs::remove(temporary, error);
    return ErrorWithReason(absl::StatusCode::kInternal, "INTERNAL_ERROR", "cannot replace " + file.string());
  }
  // What we just wrote needs no re-reading.
  index_mtime_ = fs::last_write_time(file, error);
  index_size_ = error ? 0 : fs::file_size(file, error);
  return absl::OkStatus();
}

absl::StatusOr<std::string> ModelRegistry::ResolveUnderRoot(const std::string& relative) const {
  if (options_.model_root.empty()) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "PATH_NOT_ALLOWED",
                           "the server has no model root (start it with --model-root DIR)");
  }
  const fs::path given(relative);
  if (relative.empty() || given.is_absolute()) {
    return InvalidArgumentError({"PATH_NOT_ALLOWED", "path", relative.empty() ? "\"\"" : relative,
                                 "a relative path under the server's model root"});
  }
  std::error_code error;
  const fs::path root = fs::canonical(options_.model_root, error);
  if (error) return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "PATH_NOT_FOUND", "model root missing: " + options_.model_root);
  // Containment first (without revealing whether anything exists outside the root): normalize
  // "..", resolving the symlinks of the part that exists.
  const std::string prefix = root.string() + "/";
  const fs::path lexical = fs::weakly_canonical(root / given, error);
  if (error || lexical.string().rfind(prefix, 0) != 0) {
    return InvalidArgumentError({"PATH_NOT_ALLOWED", "path", relative,
                                 "a path that stays under the model root (no '..' or symlinks leading out)"});
  }
  if (!fs::exists(lexical)) {
    return ErrorWithReason(absl::StatusCode::kNotFound, "PATH_NOT_FOUND",
                           absl::StrCat("path = ", relative, " does not exist under the model root"));
  }
  const fs::path resolved = fs::canonical(lexical, error);  // Every symlink resolved.
  if (error || resolved.string().rfind(prefix, 0) != 0) {
    return InvalidArgumentError({"PATH_NOT_ALLOWED", "path", relative,
                                 "a path that stays under the model root (no '..' or symlinks leading out)"});
  }
  return resolved.string();
}

std::string ModelRegistry::uploads_dir() const { return (fs::path(options_.data_dir) / "uploads").string(); }

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelRegistry::Load(const ModelEntry& entry) {
  ++loads_;
  const auto start = std::chrono::steady_clock::now();
  auto model = LoadUntimed(entry);
  if (model.ok() && options_.on_load) {
    options_.on_load(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return model;
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelRegistry::LoadUntimed(const ModelEntry& entry) {
  const auto& source = entry.source;
  if (source.kind == "torchscript") {
    auto path = ResolveUnderRoot(source.path);
    if (!path.ok()) return path.status();
    auto model = models::LoadTorchScriptModel(*path, source.width);
    if (!model.ok()) return model.status();
    return std::shared_ptr<models::DecoderModel>(std::move(*model));
  }
  std::string weights;
  if (source.kind == "checkpoint") {
    auto path = ResolveUnderRoot(source.path);
    if (!path.ok()) return path.status();
    weights = *path;
  } else if (source.kind == "upload") {
    weights = source.path;
  }
  auto config = ResolveConfig(source, weights);
  if (!config.ok()) return config.status();
  auto model = models::BuildModel(*config, source.seed);
  if (!model.ok()) return model.status();
  if (!weights.empty()) {
    if (auto status = models::LoadWeightsFromPath(**model, weights); !status.ok()) return status;
  }
  return std::shared_ptr<models::DecoderModel>(std::move(*model));
}

void ModelRegistry::Touch(const std::string& name, std::shared_ptr<models::DecoderModel> model) {
  cache_.remove_if([&](const auto& item) { return item.first == name; });
  cache_.emplace_front(name, std::move(model));
  int64_t used = 0;
  for (auto it = cache_.begin(); it != cache_.end();) {
    const int64_t bytes = entries_.count(it->first) ? entries_[it->first].memory_bytes : 0;
    // Evict least recently used models beyond the budget unless a job holds them.
    if (used + bytes > options_.cache_budget_bytes && it != cache_.begin() && it->second.use_count() == 1) {
      it = cache_.erase(it);
    } else {
      used += bytes;
      ++it;
    }
  }
}

absl::StatusOr<ModelEntry> ModelRegistry::Finish(ModelEntry entry) {
  auto model = Load(entry);
  if (model.ok() && entry.weights_sha256.empty() && (*model)->config().family != models::Family::kTorchScript) {
    // The weights hash is the SHA-256 of the exported F32 safetensors file (what ExportModel sends).
    const std::string scratch = (fs::path(uploads_dir()) / (".hash-" + entry.name)).string();
    if (models::ExportWeights(**model, scratch).ok()) entry.weights_sha256 = Sha256OfFile(scratch).value_or("");
    std::error_code ignored;
    fs::remove(scratch, ignored);
  }
  std::lock_guard lock(mutex_);
  if (model.ok()) {
    entry.state = ModelState::kReady;
    entry.parameters = models::ParameterCount(**model);
    entry.memory_bytes = entry.parameters * 4;
    entry.init_recipe = entry.source.kind == "preset" ? (*model)->init_recipe() : "loaded from " + entry.source.path;
    entry.config = (*model)->config();
    entries_[entry.name] = entry;
    Touch(entry.name, *model);
  } else {
    entry.state = ModelState::kFailed;
    entry.error_reason = ErrorReasonOf(model.status());
    entry.error_message = std::string(model.status().message());
    entries_[entry.name] = entry;
  }
  if (auto status = Persist(); !status.ok()) return status;
  if (!model.ok()) return model.status();
  return entry;
}

absl::StatusOr<std::optional<ModelEntry>> ModelRegistry::Reserve(const std::string& name, ModelEntry& entry,
                                                                  const std::map<std::string, std::string>& labels,
                                                                  const std::string& request_id) {
  if (auto status = CheckModelName(name); !status.ok()) return status;
  std::lock_guard lock(mutex_);
  // Replicas sharing the data directory: read the index and reserve the name in it in one turn
  // of the index lock, so that of two replicas registering one name at once exactly one wins.
  IndexLock index_lock(options_.data_dir);
  SyncIndexIfChanged(/*force=*/true);  // A name another replica registered or reserved is taken.
  if (auto it = entries_.find(name); it != entries_.end()) {
    if (!it->second.reserved_by.empty() && it->second.reserved_until_ms <= NowMs()) {
      entries_.erase(it);  // A lapsed reservation of a replica that died while registering.
    } else {
      if (!request_id.empty() && it->second.request_id == request_id) return std::optional<ModelEntry>(it->second);
      return ErrorWithReason(absl::StatusCode::kAlreadyExists, "MODEL_ALREADY_EXISTS",
                             it->second.reserved_by.empty()
                                 ? absl::StrCat("a model named ", name, " exists")
                                 : absl::StrCat("a model named ", name, " is being registered by another replica"));
    }
  }
  entry.name = name;
  entry.labels = labels;
  entry.request_id = request_id;
  entry.created_ms = NowMs();
  entry.state = ModelState::kLoading;
  entry.reserved_until_ms = entry.created_ms + kReservationMs;
  entries_[name] = entry;  // Reserves the name while loading, here and in the shared index.
  if (auto status = PersistUnderIndexLock(/*merge_from_disk=*/false); !status.ok()) {
    entries_.erase(name);
    return status;
  }
  return std::optional<ModelEntry>();
}

absl::StatusOr<ModelEntry> ModelRegistry::Register(const std::string& name, const ModelSource& source,
                                                   const std::map<std::string, std::string>& labels,
                                                   const std::string& request_id) {
  ModelEntry entry;
  entry.source = source;
  auto existing = Reserve(name, entry, labels, request_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **existing;  // A retried request.
  if (source.kind == "checkpoint" || source.kind == "torchscript") {
    if (auto path = ResolveUnderRoot(source.path); !path.ok()) {
      std::lock_guard lock(mutex_);
      entries_.erase(name);  // Refused requests leave nothing behind, in the index neither.
      (void)Persist();
      return path.status();
    }
  }
  return Finish(entry);
}

absl::StatusOr<ModelEntry> ModelRegistry::RegisterUpload(const std::string& name, const std::string& staged_path,
                                                         const std::string& config_json,
                                                         const std::map<std::string, std::string>& labels,
                                                         const std::string& request_id) {
  auto config = models::ConfigFromHuggingFaceJson(config_json);
  if (!config.ok()) return config.status();
  ModelEntry entry;
  auto existing = Reserve(name, entry, labels, request_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **existing;
  const std::string stored = (fs::path(uploads_dir()) / (name + ".safetensors")).string();
  std::error_code error;
  fs::rename(staged_path, stored, error);
  std::ofstream(stored + ".config.json") << config_json;
  entry.source.kind = "upload";
  entry.source.path = stored;
  auto sha = Sha256OfFile(stored);
  if (sha.ok()) entry.weights_sha256 = *sha;
  return Finish(entry);
}

absl::StatusOr<ModelEntry> ModelRegistry::Get(const std::string& name) {
  std::lock_guard lock(mutex_);
  SyncIndexIfChanged();
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return ErrorWithReason(absl::StatusCode::kNotFound, "MODEL_NOT_FOUND", absl::StrCat("no model named ", name));
  }
  return it->second;
}

std::vector<ModelEntry> ModelRegistry::List() {
  std::lock_guard lock(mutex_);
  SyncIndexIfChanged();
  std::vector<ModelEntry> all;
  for (const auto& [name, entry] : entries_) all.push_back(entry);
  return all;
}

absl::Status ModelRegistry::Delete(const std::string& name, bool force, int64_t active_jobs) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) {
    return ErrorWithReason(absl::StatusCode::kNotFound, "MODEL_NOT_FOUND", absl::StrCat("no model named ", name));
  }
  if (it->second.builtin) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "MODEL_BUILTIN",
                           absl::StrCat(name, " is a built-in preset and cannot be deleted"));
  }
  if (active_jobs > 0 && !force) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "MODEL_IN_USE",
                           absl::StrCat(name, " is used by ", active_jobs, " queued or running jobs (force to delete anyway)"));
  }
  if (it->second.source.kind == "upload") {
    std::error_code error;
    fs::remove(it->second.source.path, error);
    fs::remove(it->second.source.path + ".config.json", error);
  }
  entries_.erase(it);
  cache_.remove_if([&](const auto& item) { return item.first == name; });
  // Keep other replicas' registrations; the merge reads this name back from the file, so drop it again.
  IndexLock index_lock(options_.data_dir);
  (void)MergeIndexFromDisk();
  entries_.erase(name);
  return PersistUnderIndexLock(/*merge_from_disk=*/false);
}

absl::StatusOr<std::shared_ptr<models::DecoderModel>> ModelRegistry::Acquire(const std::string& name) {
  ModelEntry entry;
  {
    std::lock_guard lock(mutex_);
    SyncIndexIfChanged();
    auto it = entries_.find(name);
    if (it == entries_.end()) {
      return ErrorWithReason(absl::StatusCode::kNotFound, "MODEL_NOT_FOUND", absl::StrCat("no model named ", name));
    }
    if (it->second.state == ModelState::kFailed) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "MODEL_NOT_READY",
                             absl::StrCat(name, " failed to load: ", it->second.error_message));
    }
    if (!it->second.reserved_by.empty()) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "MODEL_NOT_READY",
                             absl::StrCat(name, " is still being registered by another replica"));
    }
    for (auto& item : cache_) {
      if (item.first == name) {
        auto model = item.second;
        Touch(name, model);
        return model;
      }
    }
    entry = it->second;
  }
  auto model = Load(entry);
  std::lock_guard lock(mutex_);
  if (!model.ok()) {
    entries_[name].state = ModelState::kFailed;
    entries_[name].error_reason = ErrorReasonOf(model.status());
    entries_[name].error_message = std::string(model.status().message());
    (void)Persist();
    return model.status();
  }
  if (entries_[name].memory_bytes == 0) {
    entries_[name].parameters = models::ParameterCount(**model);
    entries_[name].memory_bytes = entries_[name].parameters * 4;
  }
  Touch(name, *model);
  return model;
}

absl::Status ModelRegistry::Export(const std::string& name, const std::string& path) {
  auto model = Acquire(name);
  if (!model.ok()) return model.status();
  if ((*model)->config().family == models::Family::kTorchScript) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, "INVALID_ARGUMENT",
                           absl::StrCat(name, " is a TorchScript model: export its file instead"));
  }
  if (auto status = models::ExportWeights(**model, path); !status.ok()) return status;
  auto sha = Sha256OfFile(path);
  if (sha.ok()) {
    std::lock_guard lock(mutex_);
    if (auto it = entries_.find(name); it != entries_.end() && !it->second.builtin) {
      it->second.weights_sha256 = *sha;
      (void)Persist();
    }
  }
  return absl::OkStatus();
}

}  // namespace posbias::registry
