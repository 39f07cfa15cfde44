// The LibTorch families' factories, private to the room (BuildModel dispatches on the family):
// GPT-2, Qwen2, Llama, Mistral, GPT-NeoX and Cesaro routing decoders, numerically equivalent to the Hugging Face reference
// implementations (checked by tests/models/equivalence_test.py against a plain PyTorch
// reimplementation). Each builds its model at the family's seeded initialization; a c10::Error
// (such as an allocation failure) propagates to the caller.
#pragma once

#include <cstdint>
#include <memory>

#include "server/models/config.h"
#include "server/models/model.h"

namespace posbias::models {

// gpt2.cc, qwen2.cc and cesaro.cc.
std::unique_ptr<DecoderModel> MakeGpt2Model(const ModelConfig& config, uint64_t seed);
std::unique_ptr<DecoderModel> MakeQwen2Model(const ModelConfig& config, uint64_t seed);
std::unique_ptr<DecoderModel> MakeCesaroModel(const ModelConfig& config, uint64_t seed);
// llama.cc (llama and mistral) and gpt_neox.cc.
std::unique_ptr<DecoderModel> MakeLlamaModel(const ModelConfig& config, uint64_t seed);
std::unique_ptr<DecoderModel> MakeGptNeoXModel(const ModelConfig& config, uint64_t seed);

}  // namespace posbias::models
