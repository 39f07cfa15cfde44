// RegisterModel's request as what the catalog registers: the model's source (a preset with
// overrides and a seed, a checkpoint or a TorchScript file under the model root), its ablations,
// labels and request_id. gRPC-free, so the fuzz harnesses (tests/fuzz/libfuzzer/) run it alone.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "posbias/v1/model_service.pb.h"
#include "server/registry/model_entry.h"

namespace posbias::api {

struct ModelRegistration {
  std::string name;  // Checked by the catalog (registry::CheckModelName).
  registry::ModelSource source;
  std::map<std::string, std::string> labels;
  std::string request_id;
};

// INVALID_ARGUMENT when no source is set, or for labels or a request_id that break the rules of
// naming/client_names.h; the name, the source's path and its architecture are the catalog's to check.
absl::StatusOr<ModelRegistration> RegistrationFromRequest(const v1::RegisterModelRequest& request);

// UploadModel's first message as what the catalog registers once the bytes have arrived. Checked
// here, before any chunk is read, so that a bad upload is refused before its weights are sent: the
// name, labels and request_id (as above); the format (SAFETENSORS; TORCHSCRIPT uploads are
// UNIMPLEMENTED: register the file from the model root instead); no torchscript_shape; a file_name
// of at most 255 bytes; and config_json, which must parse and, with the ablations, describe a
// model this server builds (INVALID_ARGUMENT naming what is wrong).
inline constexpr size_t kMaxUploadFileNameBytes = 255;
struct UploadRegistration {
  std::string name;
  std::string config_json;
  models::Ablations ablations;
  std::map<std::string, std::string> labels;
  std::string request_id;
};
absl::StatusOr<UploadRegistration> UploadFromMetadata(const v1::UploadModelMetadata& metadata);

// The registry's types as the API's.
v1::ModelFamily FamilyToProto(models::Family family);
void ConfigToProto(const models::ModelConfig& config, v1::ModelConfig* out);
// Registry entry -> public Model message.
void ModelToProto(const registry::ModelEntry& entry, int64_t active_jobs, v1::Model* out);

}  // namespace posbias::api
