#include "server/registry/model_catalog.h"


#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "server/jsontext/bounded_json.h"
#include "server/host/disk.h"
#include "server/host/memory.h"
#include "server/ids/random_id.h"
#include "server/status/error.h"

namespace posbias::registry {
namespace fs = std::filesystem;
namespace {

// How long a registration's reservation of its name in the shared index holds when its replica
// dies before finishing (loading and hashing a checkpoint takes well under a minute).
constexpr int64_t kReservationMs = 15 * 60 * 1000;

// This process's incarnation: the same in every catalog of the process, another after a restart
// (which may reuse the pid).
const std::string& ProcessNonce() {
  static const std::string nonce = absl::StrCat(std::random_device{}());
  return nonce;
}

// host:pid:incarnation:random, one per catalog.
std::string ProcessToken() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) host[0] = '\0';
  std::random_device random;
  return absl::StrCat(host, ":", getpid(), ":", ProcessNonce(), ":", random());
}

// Whether the process named by a reservation's owner token (ProcessToken) is known to be gone:
// it ran on this host and its pid runs nothing, or is this process's own pid in another
// incarnation (a restarted container often gets the same pid). A registration killed mid-load
// then frees its name at the next start instead of after the reservation's 15 minutes.
bool ReservationOwnerGone(const std::string& owner) {
  const std::vector<std::string> parts = absl::StrSplit(owner, ':');
  if (parts.size() < 3) return false;
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0 || parts[0] != host) return false;
  int64_t pid = 0;
  if (!absl::SimpleAtoi(parts[1], &pid) || pid <= 0) return false;
  if (pid == getpid()) return parts.size() != 4 || parts[2] != ProcessNonce();
  return ::kill(static_cast<pid_t>(pid), 0) != 0 && errno != EPERM;
}

int64_t NowMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// config.json is small: a megabyte is far beyond any Hugging Face config.
constexpr uint64_t kMaxConfigBytes = uint64_t{1} << 20;

absl::Status NotFound(const std::string& name) {
  return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kModelNotFound, absl::StrCat("no model named ", name));
}

// The directory of a checkpoint's tokenizer files, or "" when it has none: tokenizer.json, or
// GPT-2's vocab.json + merges.txt, beside the weights (or in the checkpoint directory).
std::string TokenizerDirectoryOf(const std::string& checkpoint_path) {
  if (checkpoint_path.empty()) return "";
  std::error_code error;
  const fs::path path(checkpoint_path);
  const fs::path dir = fs::is_directory(path, error) ? path : path.parent_path();
  const auto named = [&](const char* file) { return files::HasEntry((dir / file).string()); };
  const bool has = named("tokenizer.json") || (named("vocab.json") && named("merges.txt"));
  return has ? dir.string() : "";
}

}  // namespace

std::string ModelCatalog::WallFolder(const std::string& relative, const std::string& tenant) const {
  if (!tenant.empty()) return tenant;
  const fs::path normal = fs::path(relative).lexically_normal();
  if (normal.empty() || normal.is_absolute()) return "";
  const std::string head = normal.begin()->string();
  if (head.empty() || head == "." || head == "..") return "";
  std::error_code error;
  return fs::is_directory(fs::path(options_.model_root) / head, error) ? head : "";
}

namespace {

// A small JSON file posbias-train writes beside a checkpoint's weights (trainer_state.json,
// posbias_task.json), read beneath the model's scope (at most 1 MiB, nested at most 8 deep); null
// when it is absent or not such a file.
nlohmann::json TrainerFile(const std::string& weights_path, const files::Scope& scope, const char* name) {
  std::error_code error;
  const fs::path dir = fs::is_directory(weights_path, error) ? fs::path(weights_path) : fs::path(weights_path).parent_path();
  const std::string file = (dir / name).string();
  if (!files::HasEntry(file)) return nullptr;
  auto text = files::ReadBeneath(scope, file, uint64_t{1} << 20);
  if (!text.ok()) return nullptr;
  jsontext::ParseBounds bounds;
  bounds.max_depth = 8;
  auto parsed = jsontext::Parse(*text, bounds);
  return parsed.outcome == jsontext::ParseOutcome::kOk ? std::move(parsed.value) : nlohmann::json(nullptr);
}

// The seed a posbias-train checkpoint's trainer_state.json records, if there is one.
std::optional<uint64_t> TrainerSeed(const std::string& weights_path, const files::Scope& scope) {
  const auto json = TrainerFile(weights_path, scope, "trainer_state.json");
  if (!json.is_object() || !json.contains("seed") || !json["seed"].is_number_unsigned()) return std::nullopt;
  return json["seed"].get<uint64_t>();
}

}  // namespace

absl::StatusOr<files::Scope> ModelCatalog::ScopeFor(const ModelSource& source, const std::string& tenant) const {
  if (source.kind == SourceKind::kUpload) return files::Scope::Of(uploads_dir(), "the server's uploads");
  if (options_.model_root.empty()) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotAllowed,
                           "the server has no model root (start it with --model-root DIR)");
  }
  const std::string wall =
      WallFolder(source.kind == SourceKind::kPreset ? source.tokenizer_path : source.path, tenant);
  if (wall.empty()) return files::Scope::Of(options_.model_root, "the model root");
  return files::Scope::Of((fs::path(options_.model_root) / wall).string(),
                          absl::StrCat("the model root's folder ", wall, "/"));
}

// Where an entry's tokenizer files are: a checkpoint's own directory, or a preset's
// tokenizer_path; "" = none.
std::string ModelCatalog::TokenizerDirOf(const ModelEntry& entry, const std::string& weights_path) const {
  if (entry.source.kind == SourceKind::kCheckpoint) return TokenizerDirectoryOf(weights_path);
  if (entry.source.kind == SourceKind::kUpload) return "";
  if (entry.source.kind == SourceKind::kPreset && !entry.source.tokenizer_path.empty()) {
    return TokenizerDirectoryOf(ResolveUnderRoot(entry.source.tokenizer_path, entry.tenant).value_or(""));
  }
  return "";
}

namespace {

// The architecture a source describes (before loading anything big).
absl::StatusOr<models::ModelConfig> ResolveConfig(const ModelSource& source, const std::string& weights_path,
                                                  const files::Scope& scope) {
  absl::StatusOr<models::ModelConfig> base;
  if (source.kind == SourceKind::kPreset) {
    base = models::PresetConfig(source.preset);
    if (!base.ok()) base = models::FamilyConfig(source.preset);
  } else if (source.kind == SourceKind::kCheckpoint || source.kind == SourceKind::kUpload) {
    const fs::path dir = fs::is_directory(weights_path) ? fs::path(weights_path) : fs::path(weights_path).parent_path();
    const fs::path config_json =
        source.kind == SourceKind::kUpload ? fs::path(weights_path + ".config.json") : dir / "config.json";
    auto text = files::ReadBeneath(scope, config_json.string(), kMaxConfigBytes);
    if (!text.ok() && absl::IsNotFound(text.status())) {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                             absl::StrCat("no config.json beside the checkpoint ", files::ShownPath(scope, weights_path),
                                          " (it defines the architecture)"));
    }
    if (!text.ok()) return text.status();
    base = models::ConfigFromHuggingFaceJson(*text);
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

std::string_view SourceKindName(SourceKind kind) {
  switch (kind) {
    case SourceKind::kPreset: return "preset";
    case SourceKind::kCheckpoint: return "checkpoint";
    case SourceKind::kTorchScript: return "torchscript";
    case SourceKind::kUpload: return "upload";
  }
  return "preset";
}

absl::StatusOr<SourceKind> ParseSourceKind(std::string_view name) {
  for (auto kind : {SourceKind::kPreset, SourceKind::kCheckpoint, SourceKind::kTorchScript, SourceKind::kUpload}) {
    if (SourceKindName(kind) == name) return kind;
  }
  return InvalidArgumentError(
      {ErrorReason::kInvalidArgument, "source.kind", std::string(name), "preset, checkpoint, torchscript or upload"});
}

std::string NewModelUid() { return ids::RandomHex(16); }  // 128 bits.

absl::Status CheckUploadConfig(const std::string& config_json, const models::Ablations& ablations) {
  auto config = models::ConfigFromHuggingFaceJson(config_json);
  if (!config.ok()) return config.status();
  config->ablations = ablations;
  return models::ValidateConfig(*config);
}

absl::Status CheckModelName(const std::string& name) {
  static const std::regex pattern("[a-z0-9][a-z0-9-]{0,62}");
  if (std::regex_match(name, pattern)) return absl::OkStatus();
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "name", name.empty() ? "\"\"" : name,
                               "1..63 characters of [a-z0-9-], starting with a letter or digit"});
}

ModelCatalog::ModelCatalog(Options options, ModelLoader* loader)
    : options_(std::move(options)), loader_(loader), index_(options_.data_dir), owner_token_(ProcessToken()) {}

absl::StatusOr<std::unique_ptr<ModelCatalog>> ModelCatalog::Open(const Options& given, ModelLoader* loader) {
  // Absolute from here on: an upload's stored path is opened beneath the uploads folder's scope,
  // where a path relative to the process's directory would name another file (found with
  // serve.sh's relative --data-dir: every upload failed with "no config.json").
  Options options = given;
  std::error_code error;
  if (!options.data_dir.empty()) options.data_dir = fs::absolute(options.data_dir, error).lexically_normal().string();
  if (!options.model_root.empty()) options.model_root = fs::absolute(options.model_root, error).lexically_normal().string();
  fs::create_directories(fs::path(options.data_dir) / "uploads", error);
  if (error) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotAllowed,
                           absl::StrCat("cannot create ", options.data_dir, "/uploads: ", error.message()));
  }
  std::unique_ptr<ModelCatalog> catalog(new ModelCatalog(options, loader));
  for (const std::string& preset : models::PresetNames()) {
    ModelEntry entry;
    entry.name = preset;
    entry.uid = "preset-" + preset;  // The same code on every replica: the same model.
    entry.generation = 1;
    entry.builtin = true;
    entry.source.kind = SourceKind::kPreset;
    entry.source.preset = preset;
    entry.config = *models::PresetConfig(preset);
    entry.state = ModelState::kReady;
    entry.init_recipe = "huggingface-" + models::FamilyName(entry.config.family) + ", seed 0";
    catalog->entries_[preset] = entry;
  }
  if (auto status = catalog->MigrateIndex(); !status.ok()) return status;
  if (auto status = catalog->MergeIndexFromDisk(); !status.ok()) return status;
  catalog->leftovers_ = catalog->RemoveLeftovers();
  return catalog;
}

ModelCatalog::Leftovers ModelCatalog::RemoveLeftovers() {
  Leftovers removed;
  const auto lock = index_.Acquire();
  removed.index_temporaries = index_.RemoveTemporaries();
  removed.scratch = RemoveStaleScratch(uploads_dir(), kScratchMaxAge);
  // Uploaded weights no index item names: a registration killed between storing the file and
  // writing the index. A registration in progress anywhere has its reservation in the index first.
  auto items = index_.Read();
  if (!items.ok()) return removed;
  std::set<std::string> listed;
  for (const auto& item : *items) {
    if (item.is_object() && item.contains("name") && item["name"].is_string()) listed.insert(item["name"].get<std::string>());
    // Uploads are stored under their uid (older ones under their name).
    if (auto entry = EntryFromItem(item); entry.ok() && entry->source.kind == SourceKind::kUpload) {
      std::string stem = fs::path(entry->source.path).filename().string();
      if (const auto dot = stem.find(".safetensors"); dot != std::string::npos) stem.resize(dot);
      listed.insert(stem);
    }
  }
  static const std::regex kStored("([a-z0-9][a-z0-9-]*)\\.safetensors(\\.config\\.json)?");
  std::error_code error;
  for (fs::directory_iterator it(uploads_dir(), error), end; !error && it != end; it.increment(error)) {
    std::smatch match;
    const std::string file = it->path().filename().string();
    if (!std::regex_match(file, match, kStored) || listed.count(match[1].str()) > 0) continue;
    std::error_code ignored;
    const uintmax_t bytes = fs::file_size(it->path(), ignored);
    if (fs::remove(it->path(), ignored)) {
      ++removed.scratch.files_removed;
      removed.scratch.bytes_removed += ignored ? 0 : bytes;
    }
  }
  return removed;
}

absl::Status ModelCatalog::MigrateIndex() {
  const auto lock = index_.Acquire();  // One replica assigns the uids; the others read them.
  auto items = index_.Read();
  if (!items.ok()) return items.status();
  bool changed = false;
  for (auto& item : *items) {
    if (!item.is_object() || (item.contains("uid") && item["uid"].is_string() && !item["uid"].get<std::string>().empty())) {
      continue;
    }
    item["uid"] = NewModelUid();
    item["generation"] = 1;
    // Checkpoint paths of a tenant's models are relative to the tenant's folder now
    // (<model-root>/<tenant>/): "lab-a/ckpt" of tenant lab-a becomes "ckpt". A path outside the
    // tenant's folder stays as it is and no longer resolves (the model fails to load).
    const std::string tenant = item.value("tenant", "");
    if (!tenant.empty() && item.contains("source") && item["source"].is_object() &&
        item["source"].value("path", "").rfind(tenant + "/", 0) == 0) {
      item["source"]["path"] = item["source"]["path"].get<std::string>().substr(tenant.size() + 1);
    }
    changed = true;
  }
  return changed ? index_.Write(*items) : absl::OkStatus();
}

absl::Status ModelCatalog::MergeIndexFromDisk() {
  auto items = index_.Read();
  if (!items.ok()) return items.status();
  return MergeIndex(*items);
}

absl::Status ModelCatalog::MergeIndex(const nlohmann::json& items) {
  for (const auto& item : items) {
    auto entry = EntryFromItem(item);
    if (!entry.ok()) return entry.status();
    // Ours (dropped here since) or lapsed: not a reservation any more.
    if (entry->state == ModelState::kLoading &&
        (entry->reserved_by == owner_token_ || entry->reserved_until_ms <= NowMs() ||
         ReservationOwnerGone(entry->reserved_by))) {
      continue;
    }
    // What this process knows stays unless the index has newer word: another registration of the
    // name (another uid: the old one was deleted, and its cached model must go), a newer record of
    // the same one (a higher generation), or another replica's reservation resolved.
    const std::string path = ModelPath(*entry);
    if (auto known = entries_.find(path); known != entries_.end()) {
      const bool own_loading = known->second.state == ModelState::kLoading && known->second.reserved_by.empty();
      if (known->second.builtin || own_loading) continue;
      const bool other_uid = !entry->uid.empty() && entry->uid != known->second.uid;
      const bool newer = entry->uid == known->second.uid && entry->generation > known->second.generation;
      if (known->second.reserved_by.empty() && !other_uid && !newer) continue;
      if (other_uid) loader_->Forget(path);
    }
    const std::string weights = entry->source.kind == SourceKind::kPreset   ? ""
                                : entry->source.kind == SourceKind::kUpload ? entry->source.path
                                                                             : ResolveUnderRoot(entry->source.path, entry->tenant).value_or("");
    // A preset without tokenizer files opens nothing; every other source opens beneath its scope.
    const bool opens = entry->source.kind != SourceKind::kPreset || !entry->source.tokenizer_path.empty();
    const absl::StatusOr<files::Scope> scope = opens ? ScopeFor(entry->source, entry->tenant) : files::Scope{};
    if (scope.ok()) {
      if (auto config = ResolveConfig(entry->source, weights, *scope); config.ok()) entry->config = *config;
      entry->tokenizer_dir = TokenizerDirOf(*entry, weights);
      entry->tokenizer_scope = *scope;
    }
    entries_[path] = *std::move(entry);
  }
  return absl::OkStatus();
}

void ModelCatalog::SyncIndexIfChanged(bool force) {
  const auto items = index_.ReadIfChanged(force);
  if (!items) return;
  std::set<std::string> listed;  // Paths.
  for (const auto& item : *items) {
    if (item.is_object() && item.contains("name") && item["name"].is_string()) {
      const auto tenant = item.find("tenant");
      listed.insert(ModelPath(tenant != item.end() && tenant->is_string() ? tenant->get<std::string>() : "",
                              item["name"].get<std::string>()));
    }
  }
  // Deleted by another replica: gone from the index (built-in presets and registrations still
  // loading here are not in it by design).
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool own_loading = it->second.state == ModelState::kLoading && it->second.reserved_by.empty();
    if (it->second.builtin || own_loading || listed.count(it->first) > 0) {
      ++it;
    } else {
      loader_->Forget(it->first);
      it = entries_.erase(it);
    }
  }
  (void)MergeIndex(*items);
}

absl::Status ModelCatalog::Persist(bool merge_from_disk) {
  auto lock = index_.Acquire();
  return PersistUnderIndexLock(merge_from_disk);
}

absl::Status ModelCatalog::PersistUnderIndexLock(bool merge_from_disk) {
  // Replicas sharing the data directory: keep what another process registered meanwhile.
  if (merge_from_disk) (void)MergeIndexFromDisk();
  nlohmann::json items = nlohmann::json::array();
  for (const auto& [name, entry] : entries_) {
    if (entry.builtin) continue;
    // A reservation of the name while it loads (ours, or another replica's still valid), so that
    // no other replica registers the same name meanwhile.
    const bool ours = entry.reserved_by.empty();
    if (entry.state == ModelState::kLoading && !ours && entry.reserved_until_ms <= NowMs()) continue;
    items.push_back(ItemFromEntry(entry, ours ? owner_token_ : entry.reserved_by));
  }
  return index_.Write(items);
}

absl::StatusOr<std::string> ModelCatalog::ResolveUnderRoot(const std::string& relative, const std::string& tenant) const {
  if (options_.model_root.empty()) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotAllowed,
                           "the server has no model root (start it with --model-root DIR)");
  }
  // A tenant's scope is its own folder. A public registration's (an admin's) path is relative to
  // the whole root, and its scope is the root's folder the path begins with (WallFolder): files
  // under a tenant's folder are that tenant's to write, so they never reach past its wall.
  const std::string wall = WallFolder(relative, tenant);
  const std::string scope = wall.empty() ? "the model root" : absl::StrCat("the model root's folder ", wall, "/");
  const fs::path given(relative);
  if (relative.empty() || given.is_absolute()) {
    return InvalidArgumentError({ErrorReason::kPathNotAllowed, "path", relative.empty() ? "\"\"" : relative,
                                 absl::StrCat("a relative path under ", scope)});
  }
  std::error_code error;
  const fs::path model_root = fs::canonical(options_.model_root, error);
  if (error) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kPathNotFound,
                           "model root missing: " + options_.model_root);
  }
  const fs::path base = tenant.empty() ? model_root : model_root / tenant;  // What `relative` is relative to.
  const fs::path root = wall.empty() ? model_root : model_root / wall;      // What it must stay under.
  // Containment first (without revealing whether anything exists outside the scope, another
  // tenant's folder included): normalize "..", resolving the symlinks of the part that exists.
  const std::string prefix = root.string() + "/";
  const auto inside = [&](const fs::path& path) { return path == root || path.string().rfind(prefix, 0) == 0; };
  const auto outside = InvalidArgumentError({ErrorReason::kPathNotAllowed, "path", relative,
                                             absl::StrCat("a path that stays under ", scope,
                                                          " (no '..' or symlinks leading out)")});
  // No '..' at all, as the docs say: a path is read as written, never normalized into another
  // folder (an admin's "lab-b/../lab-a/x" is refused, not taken as lab-a's).
  for (const fs::path& part : given) {
    if (part == "..") return outside;
  }
  const fs::path lexical = fs::weakly_canonical(base / given, error);
  if (error || !inside(lexical)) return outside;
  // A symlink inside the scope whose target is missing names no file: refused like one that
  // leads out, so a dangling link cannot probe what exists elsewhere.
  for (fs::path part = lexical; part.string().rfind(prefix, 0) == 0; part = part.parent_path()) {
    if (fs::is_symlink(part, error) && !fs::exists(part, error)) return outside;
  }
  if (!fs::exists(lexical)) {
    return ErrorWithReason(absl::StatusCode::kNotFound, ErrorReason::kPathNotFound,
                           absl::StrCat("path = ", relative, " does not exist under ", scope));
  }
  const fs::path resolved = fs::canonical(lexical, error);  // Every symlink resolved.
  if (error || !inside(resolved)) return outside;
  return resolved.string();
}

std::string ModelCatalog::uploads_dir() const { return (fs::path(options_.data_dir) / "uploads").string(); }

absl::Status ModelCatalog::CheckSourceAllowed(const ModelSource& source) const {
  if (source.kind == SourceKind::kTorchScript && !options_.allow_torchscript) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kTorchScriptDisabled,
                           "TorchScript models are off on this server (loading one runs code from the file); "
                           "its operator can allow them with --allow-torchscript");
  }
  return absl::OkStatus();
}

absl::StatusOr<LoadRequest> ModelCatalog::RequestForEntry(const ModelEntry& entry) const {
  if (auto status = CheckSourceAllowed(entry.source); !status.ok()) return status;
  LoadRequest request;
  request.name = ModelPath(entry);
  request.kind = entry.source.kind;
  request.seed = entry.source.seed;
  if (entry.source.kind == SourceKind::kCheckpoint || entry.source.kind == SourceKind::kTorchScript) {
    auto path = ResolveUnderRoot(entry.source.path, entry.tenant);
    if (!path.ok()) return path.status();
    request.weights_path = *path;
  } else if (entry.source.kind == SourceKind::kUpload) {
    request.weights_path = entry.source.path;
  }
  if (entry.source.kind != SourceKind::kPreset) {
    auto scope = ScopeFor(entry.source, entry.tenant);
    if (!scope.ok()) return scope.status();
    request.scope = *scope;
  }
  auto config = ResolveConfig(entry.source, request.weights_path, request.scope);
  if (!config.ok()) return config.status();
  request.config = *config;
  // Files can change under a registration: what it recorded is checked on every load of them.
  // An upload registered before digests were taken from the parameters recorded its stream's
  // digest instead, which no load can compare; its file is the data directory's own.
  if (!entry.stream_digest) request.weights_sha256 = entry.weights_sha256;
  return request;
}

void ModelCatalog::RemoveUploadedFiles(const std::string& weights_path) {
  std::error_code ignored;
  fs::remove(weights_path, ignored);
  fs::remove(weights_path + ".config.json", ignored);
}

absl::Status ModelCatalog::Refuse(const ModelEntry& entry, const absl::Status& why) {
  std::lock_guard lock(mutex_);
  entries_.erase(ModelPath(entry));  // The reservation goes, from the index too.
  (void)Persist();
  if (entry.source.kind != SourceKind::kUpload) return why;
  RemoveUploadedFiles(entry.source.path);
  // The stored file's name (<uid>.safetensors) is the server's business: the client sent "the
  // uploaded file" and its config.
  const std::string stored = fs::path(entry.source.path).filename().string();
  std::string message(why.message());
  absl::StrReplaceAll({{stored + ".config.json", "the upload's config.json"}, {stored, "the uploaded file"}}, &message);
  return WithMessage(why, message);
}

absl::StatusOr<ModelEntry> ModelCatalog::Finish(ModelEntry entry, const Cancelled& stop) {
  auto request = RequestForEntry(entry);
  // Refused up front: a model whose float32 parameters alone exceed the host's memory or the
  // model cache's budget (it could never be kept).
  const double bytes = request.ok() ? 4.0 * models::EstimatedParameters(request->config) : 0;
  const int64_t host = host::ReadHostMemory().total_bytes;
  const int64_t budget = options_.max_model_bytes;
  if (budget > 0 && bytes > static_cast<double>(budget)) {
    return Refuse(entry, ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           absl::StrCat("the model's float32 parameters need ", static_cast<int64_t>(bytes / (1 << 20)),
                                        " MiB, more than the model cache's ", budget >> 20, " MiB (--model-cache-mb)")));
  }
  if (host > 0 && bytes > static_cast<double>(host)) {
    return Refuse(entry, ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                                         absl::StrCat("the model's float32 parameters need ",
                                                      static_cast<int64_t>(bytes / (1 << 20)), " MiB, more than this server's ",
                                                      host >> 20, " MiB")));
  }
  // The weights' digest is the SHA-256 of the canonical float32 file (what ExportModel sends),
  // taken by the load from the parameters it read; every later load of files checks it.
  absl::StatusOr<LoadedModel> loaded = request.ok() ? loader_->Load(*request, stop) : request.status();
  if (!loaded.ok()) return Refuse(entry, loaded.status());
  entry.weights_sha256 = loaded->weights_sha256;
  entry.stream_digest = false;
  std::lock_guard lock(mutex_);
  entry.state = ModelState::kReady;
  if (request.ok()) entry.tokenizer_dir = TokenizerDirOf(entry, request->weights_path);
  if (auto scope = ScopeFor(entry.source, entry.tenant); scope.ok()) entry.tokenizer_scope = *scope;
  entry.parameters = loaded->parameters;
  entry.memory_bytes = entry.parameters * 4;
  // The source as its owner named it; an upload's stored file is the server's business.
  entry.init_recipe = entry.source.kind == SourceKind::kPreset   ? loaded->init_recipe
                      : entry.source.kind == SourceKind::kUpload ? "loaded from an upload"
                                                                 : "loaded from " + entry.source.path;
  if (entry.source.kind == SourceKind::kCheckpoint && request.ok()) {
    // A posbias-train checkpoint records the seed of its initialization: kept, so that a
    // comparison against `init` defaults to the trainer's own step 0.
    if (auto seed = TrainerSeed(request->weights_path, request->scope)) {
      entry.source.seed = *seed;
      absl::StrAppend(&entry.init_recipe, " (trained by posbias-train from seed ", *seed, ")");
    }
    // And the task it was trained on: recall jobs ask a recall task's probes by default.
    entry.trained_recall = recall::MqarFromTaskJson(TrainerFile(request->weights_path, request->scope, "posbias_task.json"));
  }
  entry.config = loaded->config;
  ++entry.generation;
  entries_[ModelPath(entry)] = entry;
  if (auto status = Persist(); !status.ok()) return status;
  return entry;
}

absl::StatusOr<std::optional<ModelEntry>> ModelCatalog::Reserve(const std::string& name, ModelEntry& entry,
                                                                 const std::map<std::string, std::string>& labels,
                                                                 const std::string& request_id) {
  if (auto status = CheckModelName(name); !status.ok()) return status;
  std::lock_guard lock(mutex_);
  // Replicas sharing the data directory: read the index and reserve the name in it in one turn
  // of the index lock, so that of two replicas registering one name at once exactly one wins.
  auto index_lock = index_.Acquire();
  SyncIndexIfChanged(/*force=*/true);  // A name another replica registered or reserved is taken.
  const std::string path = ModelPath(entry.tenant, name);
  if (auto it = entries_.find(path); it != entries_.end() && !it->second.reserved_by.empty() &&
      (it->second.reserved_until_ms <= NowMs() || ReservationOwnerGone(it->second.reserved_by))) {
    entries_.erase(it);  // A lapsed reservation of a replica that died while registering.
  }
  if (auto it = entries_.find(path); it != entries_.end()) {
    if (!request_id.empty() && it->second.request_id == request_id) return std::optional<ModelEntry>(it->second);
    return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kModelAlreadyExists,
                           it->second.reserved_by.empty()
                               ? absl::StrCat("a model named ", name, " exists")
                               : absl::StrCat("a model named ", name, " is being registered by another replica"));
  }
  // Across namespaces: a tenant's name may not shadow a public one; a public name may not be
  // one a tenant uses (only an admin registers public models, and an admin sees every tenant).
  if (!entry.tenant.empty() && entries_.count(name) > 0) {
    return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kModelAlreadyExists,
                           absl::StrCat("a public model named ", name,
                                        " exists (a tenant's model names may not be public ones)"));
  }
  if (entry.tenant.empty()) {
    for (const auto& [other_path, other] : entries_) {
      if (other.name != name || other.tenant.empty()) continue;
      return ErrorWithReason(absl::StatusCode::kAlreadyExists, ErrorReason::kModelAlreadyExists,
                             absl::StrCat("tenant ", other.tenant, " has a model named ", name,
                                          " (", other_path, "); a public model may not take a tenant's name"));
    }
  }
  entry.name = name;
  entry.uid = NewModelUid();
  entry.generation = 1;
  entry.labels = labels;
  entry.request_id = request_id;
  entry.created_ms = NowMs();
  entry.state = ModelState::kLoading;
  entry.reserved_until_ms = entry.created_ms + kReservationMs;
  entries_[path] = entry;  // Reserves the name while loading, here and in the shared index.
  if (auto status = PersistUnderIndexLock(/*merge_from_disk=*/false); !status.ok()) {
    entries_.erase(path);
    return status;
  }
  return std::optional<ModelEntry>();
}

absl::StatusOr<ModelEntry> ModelCatalog::Register(const std::string& name, const ModelSource& source,
                                                  const std::map<std::string, std::string>& labels,
                                                  const std::string& request_id, const std::string& tenant,
                                                  const Cancelled& stop) {
  if (auto status = CheckSourceAllowed(source); !status.ok()) return status;
  ModelEntry entry;
  entry.source = source;
  entry.tenant = tenant;
  auto existing = Reserve(name, entry, labels, request_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **existing;  // A retried request.
  auto refuse = [&](const absl::Status& status) {
    std::lock_guard lock(mutex_);
    entries_.erase(ModelPath(entry));  // Refused requests leave nothing behind, in the index neither.
    (void)Persist();
    return status;
  };
  if (source.kind == SourceKind::kCheckpoint || source.kind == SourceKind::kTorchScript) {
    if (auto path = ResolveUnderRoot(source.path, tenant); !path.ok()) return refuse(path.status());
  }
  if (!source.tokenizer_path.empty()) {
    auto dir = ResolveUnderRoot(source.tokenizer_path, tenant);
    if (!dir.ok()) return refuse(dir.status());
    if (!fs::is_directory(*dir) || TokenizerDirectoryOf(*dir).empty()) {
      return refuse(InvalidArgumentError({ErrorReason::kInvalidArgument, "preset.tokenizer_path", source.tokenizer_path,
                                          "a directory under the model root holding tokenizer.json, or vocab.json "
                                          "and merges.txt"}));
    }
  }
  return Finish(entry, stop);
}

absl::StatusOr<ModelEntry> ModelCatalog::RegisterUpload(const std::string& name, const std::string& staged_path,
                                                        const std::string& config_json,
                                                        const models::Ablations& ablations,
                                                        const std::map<std::string, std::string>& labels,
                                                        const std::string& request_id, const std::string& tenant,
                                                        const Cancelled& stop) {
  if (auto status = CheckUploadConfig(config_json, ablations); !status.ok()) return status;
  ModelEntry entry;
  entry.tenant = tenant;
  auto existing = Reserve(name, entry, labels, request_id);
  if (!existing.ok()) return existing.status();
  if (existing->has_value()) return **existing;
  // Named by uid: a later registration of the same name never shares (or overwrites) the file.
  const std::string stored = (fs::path(uploads_dir()) / (entry.uid + ".safetensors")).string();
  // Durable before the index names them: the weights reach the disk before they are renamed into
  // place, the config through a temporary copy, then the directory.
  std::error_code error;
  absl::Status stored_status = absl::OkStatus();
  if (const int fd = ::open(staged_path.c_str(), O_RDONLY | O_CLOEXEC); fd < 0 || ::fsync(fd) != 0) {
    stored_status = ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                                    "the uploaded bytes could not be flushed to the disk");
    if (fd >= 0) ::close(fd);
  } else if (::close(fd) != 0) {
    stored_status = ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                                    "the uploaded bytes could not be flushed to the disk");
  }
  if (stored_status.ok()) fs::rename(staged_path, stored, error);
  const std::string config_temporary = ScratchPath(uploads_dir(), "staging", name + "-config");
  if (stored_status.ok() && !error) stored_status = WriteDurably(config_temporary, config_json);
  if (stored_status.ok() && !error) fs::rename(config_temporary, stored + ".config.json", error);
  if (stored_status.ok() && !error) SyncDirectory(uploads_dir());
  const bool config_written = stored_status.ok() && !error;
  if (!config_written) {
    std::error_code ignored;
    fs::remove(config_temporary, ignored);
    RemoveUploadedFiles(stored);
    std::lock_guard lock(mutex_);
    entries_.erase(ModelPath(entry));  // The reservation goes; nothing was registered.
    (void)Persist();
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientStorage,
                           absl::StrCat("cannot store the upload in the data directory (",
                                        error ? error.message() : std::string(stored_status.message()),
                                        "); nothing was registered"));
  }
  entry.source.kind = SourceKind::kUpload;
  entry.source.path = stored;
  entry.source.ablations = ablations;
  return Finish(entry, stop);
}

absl::StatusOr<ModelEntry> ModelCatalog::Get(const std::string& path) {
  std::lock_guard lock(mutex_);
  SyncIndexIfChanged();
  auto it = entries_.find(path);
  if (it == entries_.end()) return NotFound(path);
  return it->second;
}

absl::StatusOr<ModelEntry> ModelCatalog::Find(const std::string& name, const std::string& tenant) {
  if (name.find('/') != std::string::npos || tenant.empty()) return Get(name);
  std::lock_guard lock(mutex_);
  SyncIndexIfChanged();
  auto it = entries_.find(ModelPath(tenant, name));
  if (it == entries_.end()) it = entries_.find(name);
  if (it == entries_.end()) return NotFound(name);
  return it->second;
}

absl::StatusOr<ModelEntry> ModelCatalog::GetBound(const std::string& uid, const std::string& weights_sha256,
                                                  const std::string& name, const std::string& tenant) {
  absl::StatusOr<ModelEntry> entry = NotFound(name);
  if (uid.empty()) {
    entry = Find(name, tenant);  // Recorded before uids: the name was all the job had.
  } else {
    std::lock_guard lock(mutex_);
    SyncIndexIfChanged();
    for (const auto& [path, known] : entries_) {
      if (known.uid == uid) entry = known;
    }
  }
  if (!entry.ok()) {
    if (entry.status().code() != absl::StatusCode::kNotFound) return entry.status();
    if (!uid.empty() && Find(name, tenant).ok()) {
      return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelChanged,
                             absl::StrCat("the model ", name, " this job was submitted for (uid ", uid,
                                          ") was deleted and the name registered again; the job does not run on "
                                          "another model: submit it again to measure the new one"));
    }
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelNotFound,
                           absl::StrCat("the model ", name, " this job was submitted for was deleted"));
  }
  if (!weights_sha256.empty() && !entry->weights_sha256.empty() && entry->weights_sha256 != weights_sha256) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelChanged,
                           absl::StrCat("the weights of ", name, " changed since the job was submitted"));
  }
  return entry;
}

std::vector<ModelEntry> ModelCatalog::List() {
  std::lock_guard lock(mutex_);
  SyncIndexIfChanged();
  std::vector<ModelEntry> all;
  for (const auto& [name, entry] : entries_) all.push_back(entry);
  return all;
}

absl::Status ModelCatalog::Delete(const std::string& path, bool force, int64_t active_jobs) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(path);
  if (it == entries_.end()) return NotFound(path);
  const std::string name = it->second.name;
  if (it->second.builtin) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelBuiltin,
                           absl::StrCat(name, " is a built-in preset and cannot be deleted"));
  }
  if (active_jobs > 0 && !force) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelInUse,
                           absl::StrCat(name, " is used by ", active_jobs, " queued or running jobs (force to delete anyway)"));
  }
  if (it->second.source.kind == SourceKind::kUpload) {
    std::error_code error;
    fs::remove(it->second.source.path, error);
    fs::remove(it->second.source.path + ".config.json", error);
  }
  entries_.erase(it);
  loader_->Forget(path);
  // Keep other replicas' registrations; the merge reads this name back from the file, so drop it again.
  auto index_lock = index_.Acquire();
  (void)MergeIndexFromDisk();
  entries_.erase(path);
  return PersistUnderIndexLock(/*merge_from_disk=*/false);
}

absl::StatusOr<LoadRequest> ModelCatalog::RequestFor(const std::string& name) {
  std::lock_guard lock(mutex_);
  SyncIndexIfChanged();
  auto it = entries_.find(name);
  if (it == entries_.end()) return NotFound(name);
  if (it->second.state == ModelState::kFailed) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelNotReady,
                           absl::StrCat(name, " failed to load: ", it->second.error_message));
  }
  if (!it->second.reserved_by.empty()) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kModelNotReady,
                           absl::StrCat(name, " is still being registered by another replica"));
  }
  return RequestForEntry(it->second);
}

void ModelCatalog::RecordLoadFailure(const std::string& name, const absl::Status& status) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end()) return;
  it->second.state = ModelState::kFailed;
  ++it->second.generation;
  it->second.error_reason = ErrorReasonOf(status);
  it->second.error_message = std::string(status.message());
  (void)Persist();
}

void ModelCatalog::RecordLoaded(const std::string& name, const LoadedModel& loaded) {
  std::lock_guard lock(mutex_);
  auto it = entries_.find(name);
  if (it == entries_.end() || it->second.memory_bytes > 0) return;
  it->second.parameters = loaded.parameters;
  it->second.memory_bytes = loaded.parameters * 4;
}

absl::Status ModelCatalog::Export(const std::string& model_path, const std::string& file, const Cancelled& cancelled) {
  auto request = RequestFor(model_path);
  if (!request.ok()) return request.status();
  if (request->kind == SourceKind::kTorchScript) {
    return ErrorWithReason(absl::StatusCode::kFailedPrecondition, ErrorReason::kInvalidArgument,
                           absl::StrCat(model_path, " is a TorchScript model: export its file instead"));
  }
  // Read-only: the recorded digest is the registration's (an upload's is its stream's, which an
  // F32 export of it need not equal); an export never changes it, nor the model's generation.
  absl::Status exported = loader_->Export(*request, file, cancelled);
  // Weights that changed on disk mark the registration, as a job's load does.
  if (ErrorReasonOf(exported) == ErrorReasonName(ErrorReason::kModelChanged)) RecordLoadFailure(model_path, exported);
  return exported;
}

}  // namespace posbias::registry
