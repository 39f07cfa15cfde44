// Weights in Hugging Face form: loading a safetensors checkpoint into a model (names and shapes
// checked, F32/F16/BF16/F64 converted), and exporting a model's parameters with the same names.
#pragma once

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "server/models/model.h"
#include "server/safetensors/safetensors.h"

namespace posbias::models {

// Every model parameter must be in the checkpoint with the same shape; a checkpoint tensor the
// model does not use is an error too, except buffers transformers saves (GPT-2 "attn.bias" /
// "attn.masked_bias", "rotary_emb.inv_freq") and a tied "lm_head.weight". GPT-2 names are also
// accepted without the "transformer." prefix (checkpoints of GPT2Model). Errors are
// INVALID_MODEL_FILE naming the tensor.
// `stop` is asked between tensors (and while headers are parsed): true ends the load with CANCELLED.
absl::Status LoadWeights(DecoderModel& model, const safetensors::Checkpoint& checkpoint,
                         const std::function<bool()>& stop = nullptr);
// Every file of the checkpoint is opened beneath `scope` (files/open_beneath.h; anywhere by default).
absl::Status LoadWeightsFromPath(DecoderModel& model, const std::string& path, const files::Scope& scope = {},
                                 const std::function<bool()>& stop = nullptr);

// Writes every parameter (Hugging Face names, the given dtype: F32, F16 or BF16) to one file,
// one tensor at a time: beyond the model, the export holds at most one converted tensor (none
// for float32 parameters on the CPU). Once `cancelled` says so (checked between tensors), it
// stops with CANCELLED and leaves nothing at `path`.
absl::Status ExportWeights(DecoderModel& model, const std::string& path,
                           safetensors::DType dtype = safetensors::DType::kF32,
                           const std::function<bool()>& cancelled = nullptr);

// The bytes ExportWeights writes with dtype F32 (the canonical file: ExportModel's default), handed
// to `sink` in order instead of a file: the weights' digest is the SHA-256 of these bytes, taken
// from the parameters in memory, so it names what a job measures, whatever file they came from.
absl::Status StreamWeights(DecoderModel& model, const safetensors::ByteSink& sink,
                           const std::function<bool()>& cancelled = nullptr);

}  // namespace posbias::models
