#include "server/models/weights.h"

#include <map>
#include <set>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "server/models/architecture.h"
#include "server/status/error.h"

namespace posbias::models {
namespace {

bool EndsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Buffers and duplicates that transformers writes but no parameter corresponds to.
// Whether a checkpoint tensor belongs to a layer's MLP branch (the MLP and the norms only it reads),
// which a model with the MLP ablated does not have.
bool InMlpBranch(const std::string& name, const Architecture& a) {
  if (name.find(std::string(".") + a.names.mlp + ".") != std::string::npos) return true;
  for (const char* norm : {a.parallel_residual ? nullptr : a.names.norm2, a.names.post_mlp_norm}) {
    if (norm != nullptr && name.find(std::string(".") + norm + ".") != std::string::npos) return true;
  }
  return false;
}

// The row's attention module name carries the causal-mask buffers older checkpoints wrote (GPT-2's
// attn.bias, GPT-NeoX's attention.bias); a tied model ignores a written-out head.
bool IsIgnorable(const std::string& name, const ModelConfig& config) {
  const Architecture* a = ArchitectureOf(config.family);
  const std::string attention = a != nullptr ? a->names.attention : "attn";
  const std::string head = a != nullptr && a->names.head != nullptr ? a->names.head : "lm_head";
  const bool has_mask_buffers = a != nullptr && (a->conv1d || a->attention == Architecture::AttentionLayout::kFusedPerHead);
  return (has_mask_buffers && (EndsWith(name, "." + attention + ".bias") || EndsWith(name, "." + attention + ".masked_bias"))) ||
         EndsWith(name, "rotary_emb.inv_freq") || (config.tie_embeddings && name == head + ".weight") ||
         (config.ablations.no_mlp && a != nullptr && InMlpBranch(name, *a));
}

// The checkpoint name holding parameter `name`, or "" when none does.
std::string FindName(const safetensors::Checkpoint& checkpoint, const std::set<std::string>& names,
                     const std::string& name) {
  if (names.count(name)) return name;
  const std::string prefix = "transformer.";
  if (name.rfind(prefix, 0) == 0 && names.count(name.substr(prefix.size()))) return name.substr(prefix.size());
  (void)checkpoint;
  return "";
}

std::string ShapeText(const std::vector<int64_t>& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

absl::Status CopyInto(torch::Tensor& parameter, const safetensors::Checkpoint& checkpoint, const std::string& name) {
  const auto& info = *checkpoint.Info(name);
  if (parameter.sizes().vec() != info.shape) {
    return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                           absl::StrCat("tensor '", info.name, "' has shape ", ShapeText(info.shape),
                                        ", the model expects ", ShapeText(parameter.sizes().vec())));
  }
  auto values = torch::empty(info.shape, torch::kFloat32);
  if (auto status = checkpoint.ReadFloat32(name, values.data_ptr<float>()); !status.ok()) return status;
  torch::NoGradGuard no_grad;
  parameter.copy_(values);
  return absl::OkStatus();
}

}  // namespace

absl::Status LoadWeights(DecoderModel& model, const safetensors::Checkpoint& checkpoint, const std::function<bool()>& stop) {
  const std::vector<std::string> listed = checkpoint.TensorNames();
  const std::set<std::string> names(listed.begin(), listed.end());
  std::set<std::string> used;
  for (auto& [name, parameter] : model.NamedParameters()) {
    const std::string found = FindName(checkpoint, names, name);
    if (found.empty()) {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                             absl::StrCat("missing tensor '", name, "' in the checkpoint"));
    }
    if (stop && stop()) {
      return absl::CancelledError("stopped while the weights were read (the call was cancelled, its job stopped, or "
                                  "the server is shutting down)");
    }
    if (auto status = CopyInto(parameter, checkpoint, found); !status.ok()) return status;
    used.insert(found);
  }
  for (const std::string& name : listed) {
    if (!used.count(name) && !IsIgnorable(name, model.config())) {
      return ErrorWithReason(absl::StatusCode::kInvalidArgument, ErrorReason::kInvalidModelFile,
                             absl::StrCat("unexpected tensor '", name, "' in the checkpoint (not a parameter of this ",
                                          FamilyName(model.config().family), " model)"));
    }
  }
  return absl::OkStatus();
}

absl::Status LoadWeightsFromPath(DecoderModel& model, const std::string& path, const files::Scope& scope,
                                 const std::function<bool()>& stop) {
  auto checkpoint = safetensors::Checkpoint::Open(path, scope, stop);
  if (!checkpoint.ok()) return checkpoint.status();
  return LoadWeights(model, *checkpoint, stop);
}

namespace {

// The export's layout (every parameter, Hugging Face names, in `dtype`) and its data, one tensor
// at a time: what ExportWeights writes and WeightsDigest hashes.
struct ExportPlan {
  std::vector<std::pair<std::string, torch::Tensor>> parameters;
  std::vector<safetensors::TensorToWrite> tensors;
  torch::Tensor values;              // The tensor being written, float32 on the CPU (often the parameter itself).
  std::vector<std::byte> converted;  // Its bytes in `dtype`, when that is not float32.
};

const std::map<std::string, std::string>& ExportMetadata() {
  static const std::map<std::string, std::string> metadata = {{"format", "pt"}};
  return metadata;
}

safetensors::TensorData PlanExport(DecoderModel& model, safetensors::DType dtype, const std::function<bool()>& cancelled,
                                   ExportPlan& plan) {
  plan.parameters = model.NamedParameters();
  for (const auto& [name, parameter] : plan.parameters) {
    const size_t bytes = static_cast<size_t>(parameter.numel()) * safetensors::DTypeSize(dtype);
    plan.tensors.push_back({name, dtype, parameter.sizes().vec(), nullptr, bytes});
  }
  return [&plan, dtype, cancelled](size_t i) -> absl::StatusOr<const void*> {
    if (cancelled && cancelled()) return absl::CancelledError("the export was cancelled");
    plan.values = plan.parameters[i].second.detach().to(torch::kCPU, torch::kFloat32).contiguous();
    if (dtype == safetensors::DType::kF32) return static_cast<const void*>(plan.values.data_ptr<float>());
    plan.converted.resize(plan.tensors[i].size_bytes);
    safetensors::ConvertFromFloat32(plan.values.data_ptr<float>(), static_cast<size_t>(plan.values.numel()), dtype,
                                    plan.converted.data());
    return static_cast<const void*>(plan.converted.data());
  };
}

}  // namespace

absl::Status ExportWeights(DecoderModel& model, const std::string& path, safetensors::DType dtype,
                           const std::function<bool()>& cancelled) {
  ExportPlan plan;
  const safetensors::TensorData data = PlanExport(model, dtype, cancelled, plan);
  return safetensors::WriteFile(path, plan.tensors, ExportMetadata(), data);
}

absl::Status StreamWeights(DecoderModel& model, const safetensors::ByteSink& sink, const std::function<bool()>& cancelled) {
  ExportPlan plan;
  const safetensors::TensorData data = PlanExport(model, safetensors::DType::kF32, cancelled, plan);
  return safetensors::StreamFile(plan.tensors, ExportMetadata(), data, sink);
}

}  // namespace posbias::models
