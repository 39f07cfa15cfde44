// BuildModel, the one door to the LibTorch families (families.h): the config checked, then the
// family's model at its seeded initialization; and ParameterCount.
#include <c10/util/Exception.h>

#include "absl/strings/str_cat.h"
#include "server/models/config.h"
#include "server/models/families.h"
#include "server/models/model.h"
#include "server/status/error.h"

namespace posbias::models {

absl::StatusOr<std::unique_ptr<DecoderModel>> BuildModel(const ModelConfig& config, uint64_t seed) {
  if (auto status = ValidateConfig(config); !status.ok()) return status;
  try {
    if (config.family == Family::kCesaro) return MakeCesaroModel(config, seed);
    if (auto model = MakeDecoderModel(config, seed)) return model;
  } catch (const c10::Error& error) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           absl::StrCat("cannot build the model: ", error.what_without_backtrace()));
  }
  return InvalidArgumentError({ErrorReason::kInvalidArgument, "arch", "torchscript",
                               BuiltFamiliesText() + " (TorchScript models are loaded, not built)"});
}

int64_t ParameterCount(DecoderModel& model) {
  int64_t count = 0;
  for (const auto& [name, tensor] : model.NamedParameters()) count += tensor.numel();
  return count;
}

}  // namespace posbias::models
