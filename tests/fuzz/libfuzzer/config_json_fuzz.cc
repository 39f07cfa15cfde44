// libFuzzer harness: a Hugging Face config.json as RegisterModel's checkpoints and UploadModel
// bring it (models::ConfigFromHuggingFaceJson, then ValidateConfig and what registration computes
// from an accepted config).
//
// Promises checked: every input is a config that validates, or a clean refusal
// (INVALID_ARGUMENT / INVALID_MODEL_FILE or a field error; fuzz_check.h); an accepted config's
// size estimates are finite and non-negative, and its export (ConfigToHuggingFaceJson, what
// ExportModel writes beside the weights) reads back as the same architecture.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <string>

#include "server/models/config.h"
#include "tests/fuzz/libfuzzer/fuzz_check.h"

namespace {

using posbias::fuzz::Require;
using posbias::models::ModelConfig;

void CheckSameArchitecture(const ModelConfig& a, const ModelConfig& b) {
  Require(a.family == b.family && a.num_layers == b.num_layers && a.hidden_size == b.hidden_size &&
              a.num_heads == b.num_heads && a.num_kv_heads == b.num_kv_heads &&
              a.intermediate_size == b.intermediate_size && a.vocab_size == b.vocab_size &&
              a.max_positions == b.max_positions && a.tie_embeddings == b.tie_embeddings,
          "exported config.json reads back as another architecture");
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  const absl::StatusOr<ModelConfig> config = posbias::models::ConfigFromHuggingFaceJson(text);
  if (!config.ok()) {
    posbias::fuzz::RequireCleanRefusal(config.status(), "ConfigFromHuggingFaceJson");
    return 0;
  }
  Require(posbias::models::ValidateConfig(*config).ok(), "an accepted config.json does not validate");
  const double parameters = posbias::models::EstimatedParameters(*config);
  Require(std::isfinite(parameters) && parameters >= 0, "EstimatedParameters not finite");
  const double activations = posbias::models::ActivationElementsPerLayer(*config, config->max_positions);
  Require(std::isfinite(activations) && activations >= 0, "ActivationElementsPerLayer not finite");

  const std::string exported = posbias::models::ConfigToHuggingFaceJson(*config);
  const absl::StatusOr<ModelConfig> again = posbias::models::ConfigFromHuggingFaceJson(exported);
  Require(again.ok(), "exported config.json is refused", again.status().ToString() + "\n" + exported);
  CheckSameArchitecture(*config, *again);
  return 0;
}
