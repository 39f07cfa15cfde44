// RegisterModel's request as what the catalog registers: the model's source (a preset with
// overrides and a seed, a checkpoint or a TorchScript file under the model root), its ablations,
// labels and request_id. gRPC-free, so the fuzz harnesses (tests/fuzz/libfuzzer/) run it alone.
#pragma once

#include <map>
#include <string>

#include "absl/status/statusor.h"
#include "posbias/v1/model_service.pb.h"
#include "server/registry/model_entry.h"

namespace posbias::service {

struct ModelRegistration {
  std::string name;  // Checked by the catalog (registry::CheckModelName).
  registry::ModelSource source;
  std::map<std::string, std::string> labels;
  std::string request_id;
};

// INVALID_ARGUMENT when no source is set, or for labels or a request_id that break the rules of
// admission/labels.h; the name, the source's path and its architecture are the catalog's to check.
absl::StatusOr<ModelRegistration> RegistrationFromRequest(const v1::RegisterModelRequest& request);

}  // namespace posbias::service
