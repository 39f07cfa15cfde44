// The LibTorch models' factories, private to the room (BuildModel dispatches on the family): the one
// decoder of GPT-2, Qwen2, Llama, Mistral and GPT-NeoX, numerically equivalent to the Hugging Face
// reference implementations (checked by tests/models/equivalence_test.py and families_test.py
// against plain PyTorch reimplementations), and the Cesaro routing model. Each builds its model at the family's seeded initialization; a c10::Error
// (such as an allocation failure) propagates to the caller.
#pragma once

#include <cstdint>
#include <memory>

#include "server/models/config.h"
#include "server/models/model.h"

namespace posbias::models {

// decoder.cc: every family with a row in the family table (architecture.h); nullptr for others.
std::unique_ptr<DecoderModel> MakeDecoderModel(const ModelConfig& config, uint64_t seed);
// cesaro.cc.
std::unique_ptr<DecoderModel> MakeCesaroModel(const ModelConfig& config, uint64_t seed);

}  // namespace posbias::models
