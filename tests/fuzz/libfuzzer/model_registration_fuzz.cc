// libFuzzer harness: RegisterModel and UploadModel's request checks, through the real model
// catalog (registry::ModelCatalog) with a loader that builds nothing.
//
// Input: byte 0 bit 0 chooses the RPC (RegisterModel, or UploadModel's first message), bit 1
// whether the server allows TorchScript; the rest is the serialized request. RegisterModel:
// api::RegistrationFromRequest, then ModelCatalog::Register (names, labels, request ids,
// presets and overrides through ValidateConfig, checkpoint and TorchScript paths under the model
// root, symlinks leading out, config.json beside a checkpoint, the memory check). UploadModel: the
// metadata checks the upload stream runs on its first message (name, labels, request_id), then
// ModelCatalog::RegisterUpload with the metadata's config.json over a small staged file.
//
// Everything lives in one scratch directory made at the first input (under /dev/shm where there
// is one, so the index's fsyncs cost nothing): a model root with a few checkpoints, a TorchScript
// file, a symlink leading out of the root and one looping on itself, and two data directories.
// No model is built: the loader returns the resolved config as loaded. Each input's model is
// deleted again, so inputs do not depend on each other (the replay test gives the same verdicts).
//
// Promises checked: OK, or a clean refusal (fuzz_check.h) that leaves nothing behind but, at
// most, a FAILED entry (a registration that failed to load stays listed, by design); after each
// input the uploads directory holds no file.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>

#include "posbias/v1/model_service.pb.h"
#include "server/models/config.h"
#include "server/registry/model_catalog.h"
#include "server/registry/model_loader.h"
#include "server/api/model_convert.h"
#include "tests/fuzz/libfuzzer/fuzz_check.h"

namespace {

namespace fs = std::filesystem;
namespace v1 = posbias::v1;
using posbias::fuzz::Fail;
using posbias::fuzz::Require;
using posbias::fuzz::RequireCleanRefusal;
using posbias::registry::ModelCatalog;

class NothingLoader final : public posbias::registry::ModelLoader {
 public:
  absl::StatusOr<posbias::registry::LoadedModel> Load(const posbias::registry::LoadRequest& request,
                                                      const posbias::registry::Cancelled&) override {
    posbias::registry::LoadedModel loaded;
    loaded.config = request.config;
    loaded.parameters = static_cast<int64_t>(posbias::models::EstimatedParameters(request.config));
    loaded.init_recipe = "fuzz: nothing built";
    return loaded;
  }
  absl::Status Export(const posbias::registry::LoadRequest&, const std::string&,
                      const posbias::registry::Cancelled&) override {
    return absl::UnimplementedError("the fuzz loader exports nothing");
  }
  void Forget(const std::string&) override {}
};

void WriteText(const fs::path& path, const std::string& text) {
  fs::create_directories(path.parent_path());
  std::ofstream(path, std::ios::binary | std::ios::trunc) << text;
}

const char kTinyGpt2[] =
    R"({"model_type": "gpt2", "n_layer": 2, "n_embd": 64, "n_head": 4, "vocab_size": 128, "n_positions": 128})";
const char kTinyQwen2[] =
    R"({"model_type": "qwen2", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
        "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 128, "max_position_embeddings": 512})";

struct Environment {
  fs::path root;
  NothingLoader loader;
  std::unique_ptr<ModelCatalog> catalogs[2];  // [allow_torchscript]

  Environment() {
    const char* shm = "/dev/shm";
    const std::string base = ::access(shm, W_OK) == 0 ? shm : fs::temp_directory_path().string();
    std::string pattern = base + "/posbias-fuzz-models-XXXXXX";
    Require(::mkdtemp(pattern.data()) != nullptr, "cannot make the scratch directory", pattern);
    root = pattern;
    const fs::path models = root / "models";
    WriteText(models / "gpt2-tiny" / "config.json", kTinyGpt2);
    WriteText(models / "gpt2-tiny" / "model.safetensors", "");
    WriteText(models / "qwen2-tiny" / "config.json", kTinyQwen2);
    WriteText(models / "qwen2-tiny" / "model.safetensors.index.json", R"({"weight_map": {}})");
    WriteText(models / "broken" / "config.json", R"({"model_type": "gpt2", "n_layer": )");
    WriteText(models / "bare" / "model.safetensors", "");
    WriteText(models / "scripted.pt", "not really TorchScript");
    fs::create_symlink("/", models / "escape");
    fs::create_symlink("loop", models / "loop");
    fs::create_directory_symlink("gpt2-tiny", models / "alias");
    for (int allow = 0; allow < 2; ++allow) {
      ModelCatalog::Options options;
      options.model_root = models.string();
      options.data_dir = (root / ("data" + std::to_string(allow))).string();
      options.allow_torchscript = allow == 1;
      auto catalog = ModelCatalog::Open(options, &loader);
      Require(catalog.ok(), "cannot open the catalog", catalog.status().ToString());
      catalogs[allow] = *std::move(catalog);
    }
  }
  ~Environment() {
    std::error_code ignored;
    fs::remove_all(root, ignored);
  }
};

Environment& Env() {
  static Environment environment;  // Destroyed at exit: the scratch directory goes with it.
  return environment;
}

// After an input: its model deleted (FAILED entries included) and nothing left in uploads/.
void CleanUp(ModelCatalog& catalog, const std::string& name) {
  auto entry = catalog.Get(name);
  if (entry.ok() && !entry->builtin) {
    const absl::Status deleted = catalog.Delete(name, /*force=*/true, /*active_jobs=*/0);
    Require(deleted.ok(), "cannot delete a model just registered", deleted.ToString());
  }
  for (const auto& file : fs::directory_iterator(catalog.uploads_dir())) {
    Fail("a file left in uploads/", file.path().string());
  }
}

void RequireNothingLeft(ModelCatalog& catalog, const std::string& name, const absl::Status& refusal,
                        bool existed_before) {
  RequireCleanRefusal(refusal, "Register");
  if (existed_before) return;
  auto entry = catalog.Get(name);
  Require(!entry.ok() || entry->state == posbias::registry::ModelState::kFailed,
          "a refused registration left a model that is not FAILED", name + ": " + refusal.ToString());
}

void Register(ModelCatalog& catalog, const std::string& bytes) {
  v1::RegisterModelRequest request;
  if (!request.ParseFromString(bytes)) return;
  auto registration = posbias::api::RegistrationFromRequest(request);
  if (!registration.ok()) return RequireCleanRefusal(registration.status(), "RegistrationFromRequest");
  const bool existed = catalog.Get(registration->name).ok();
  auto entry = catalog.Register(registration->name, registration->source, registration->labels,
                                registration->request_id);
  if (!entry.ok()) {
    RequireNothingLeft(catalog, registration->name, entry.status(), existed);
  } else {
    Require(posbias::models::ValidateConfig(entry->config).ok() ||
                entry->config.family == posbias::models::Family::kTorchScript,
            "a registered model's config does not validate");
  }
  CleanUp(catalog, registration->name);
}

void Upload(ModelCatalog& catalog, const std::string& bytes) {
  v1::UploadModelRequest request;
  if (!request.ParseFromString(bytes) || !request.has_metadata()) return;
  const v1::UploadModelMetadata& metadata = request.metadata();
  // The checks the upload stream makes on its first message (grpc/model_transfers.cc).
  auto upload = posbias::api::UploadFromMetadata(metadata);
  if (!upload.ok()) return RequireCleanRefusal(upload.status(), "UploadFromMetadata");
  const bool existed = catalog.Get(metadata.name()).ok();
  const std::string staged = catalog.uploads_dir() + "/.staging-" + metadata.name() + "-fuzz";
  WriteText(staged, "staged bytes");
  auto entry = catalog.RegisterUpload(upload->name, staged, upload->config_json, upload->ablations, upload->labels,
                                    upload->request_id);
  std::error_code ignored;
  fs::remove(staged, ignored);  // The stream removes its staging file when the call ends.
  if (!entry.ok()) RequireNothingLeft(catalog, metadata.name(), entry.status(), existed);
  CleanUp(catalog, metadata.name());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  ModelCatalog& catalog = *Env().catalogs[(data[0] >> 1) & 1];
  if ((data[0] & 1) == 0) {
    Register(catalog, bytes);
  } else {
    Upload(catalog, bytes);
  }
  return 0;
}
