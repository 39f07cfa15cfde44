#include "server/service/model_convert.h"

#include "absl/strings/str_cat.h"
#include "server/admission/labels.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

models::ConfigOverrides OverridesFromProto(const v1::ModelArchitectureOverrides& o) {
  models::ConfigOverrides overrides;
  if (o.has_num_layers()) overrides.num_layers = o.num_layers();
  if (o.has_hidden_size()) overrides.hidden_size = o.hidden_size();
  if (o.has_num_heads()) overrides.num_heads = o.num_heads();
  if (o.has_num_kv_heads()) overrides.num_kv_heads = o.num_kv_heads();
  if (o.has_mlp_width()) overrides.intermediate_size = o.mlp_width();
  if (o.has_vocab_size()) overrides.vocab_size = o.vocab_size();
  if (o.has_max_positions()) overrides.max_positions = o.max_positions();
  if (o.has_rope_theta()) overrides.rope_theta = o.rope_theta();
  if (o.has_tie_embeddings()) overrides.tie_embeddings = o.tie_embeddings();
  if (o.has_cesaro_alpha()) overrides.cesaro_alpha = o.cesaro_alpha();
  if (o.has_initializer_range()) overrides.initializer_range = o.initializer_range();
  if (o.has_sliding_window()) overrides.sliding_window = o.sliding_window();
  return overrides;
}

models::Ablations AblationsFromProto(const v1::ModelAblations& a) {
  models::Ablations ablations;
  ablations.no_position_encoding = a.no_position_encoding();
  ablations.uniform_attention = a.uniform_attention();
  ablations.no_mlp = a.no_mlp();
  return ablations;
}

}  // namespace

absl::StatusOr<ModelRegistration> RegistrationFromRequest(const v1::RegisterModelRequest& request) {
  ModelRegistration registration;
  registry::ModelSource& source = registration.source;
  if (request.has_preset()) {
    source.kind = registry::SourceKind::kPreset;
    source.preset = request.preset().preset();
    source.overrides = OverridesFromProto(request.preset().overrides());
    source.seed = request.preset().has_init_seed() ? request.preset().init_seed() : 0;
    source.tokenizer_path = request.preset().tokenizer_path();
  } else if (request.has_checkpoint()) {
    source.kind = registry::SourceKind::kCheckpoint;
    source.path = request.checkpoint().path();
  } else if (request.has_torchscript()) {
    source.kind = registry::SourceKind::kTorchScript;
    source.path = request.torchscript().path();
    source.width = request.torchscript().shape().hidden_size();
  } else {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "source", "not set", "preset, checkpoint or torchscript"});
  }
  source.ablations = AblationsFromProto(request.ablations());
  registration.labels = {request.labels().begin(), request.labels().end()};
  if (auto status = admission::CheckLabels(registration.labels); !status.ok()) return status;
  if (auto status = admission::CheckRequestId(request.request_id()); !status.ok()) return status;
  registration.name = request.name();
  registration.request_id = request.request_id();
  return registration;
}

absl::StatusOr<UploadRegistration> UploadFromMetadata(const v1::UploadModelMetadata& metadata) {
  UploadRegistration upload;
  upload.name = metadata.name();
  upload.labels = {metadata.labels().begin(), metadata.labels().end()};
  upload.request_id = metadata.request_id();
  upload.config_json = metadata.config_json();
  upload.ablations = AblationsFromProto(metadata.ablations());
  for (const auto& status : {registry::CheckModelName(upload.name), admission::CheckLabels(upload.labels),
                             admission::CheckRequestId(upload.request_id)}) {
    if (!status.ok()) return status;
  }
  if (metadata.format() == v1::MODEL_FILE_FORMAT_TORCHSCRIPT) {
    return ErrorWithReason(absl::StatusCode::kUnimplemented, ErrorReason::kNotImplemented,
                           "uploading a TorchScript module is not supported: put the file under the server's "
                           "--model-root and call RegisterModel with a torchscript source");
  }
  if (metadata.has_torchscript_shape()) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "torchscript_shape", "set",
                                 "unset for a SAFETENSORS upload (its config_json gives the shape)"});
  }
  if (metadata.file_name().size() > kMaxUploadFileNameBytes) {
    return InvalidArgumentError({ErrorReason::kInvalidArgument, "file_name",
                                 absl::StrCat(metadata.file_name().size(), " bytes"),
                                 absl::StrCat("at most ", kMaxUploadFileNameBytes, " bytes")});
  }
  if (upload.config_json.empty()) {
    return InvalidArgumentError({ErrorReason::kEmptyRequest, "config_json", "empty",
                                 "the Hugging Face config.json text of the uploaded checkpoint"});
  }
  if (auto status = registry::CheckUploadConfig(upload.config_json, upload.ablations); !status.ok()) return status;
  return upload;
}

}  // namespace posbias::service
