#include "server/api/model_convert.h"

#include <cmath>

#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "server/naming/client_names.h"
#include "server/models/architecture.h"
#include "server/status/error.h"

namespace posbias::api {
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
  if (auto status = naming::CheckLabels(registration.labels); !status.ok()) return status;
  if (auto status = naming::CheckRequestId(request.request_id()); !status.ok()) return status;
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
  for (const auto& status : {registry::CheckModelName(upload.name), naming::CheckLabels(upload.labels),
                             naming::CheckRequestId(upload.request_id)}) {
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

v1::ModelFamily FamilyToProto(models::Family family) {
  switch (family) {
    case models::Family::kGpt2: return v1::MODEL_FAMILY_GPT2;
    case models::Family::kQwen2: return v1::MODEL_FAMILY_QWEN2;
    case models::Family::kCesaro: return v1::MODEL_FAMILY_CESARO;
    case models::Family::kTorchScript: return v1::MODEL_FAMILY_TORCHSCRIPT;
    case models::Family::kLlama: return v1::MODEL_FAMILY_LLAMA;
    case models::Family::kMistral: return v1::MODEL_FAMILY_MISTRAL;
    case models::Family::kGptNeoX: return v1::MODEL_FAMILY_GPT_NEOX;
    case models::Family::kQwen3: return v1::MODEL_FAMILY_QWEN3;
    case models::Family::kGemma: return v1::MODEL_FAMILY_GEMMA;
    case models::Family::kGemma2: return v1::MODEL_FAMILY_GEMMA2;
    case models::Family::kGemma3: return v1::MODEL_FAMILY_GEMMA3_TEXT;
    case models::Family::kPhi3: return v1::MODEL_FAMILY_PHI3;
    case models::Family::kOlmo2: return v1::MODEL_FAMILY_OLMO2;
    case models::Family::kGranite: return v1::MODEL_FAMILY_GRANITE;
    case models::Family::kSmolLm3: return v1::MODEL_FAMILY_SMOLLM3;
  }
  return v1::MODEL_FAMILY_UNSPECIFIED;
}

void ConfigToProto(const models::ModelConfig& c, v1::ModelConfig* out) {
  out->set_family(FamilyToProto(c.family));
  out->set_num_layers(static_cast<uint32_t>(c.num_layers));
  out->set_hidden_size(static_cast<uint32_t>(c.hidden_size));
  out->set_num_heads(static_cast<uint32_t>(c.num_heads));
  out->set_num_kv_heads(static_cast<uint32_t>(c.num_kv_heads));
  out->set_head_dim(static_cast<uint32_t>(c.head_dim()));
  out->set_mlp_width(static_cast<uint32_t>(c.intermediate_size));
  out->set_vocab_size(static_cast<uint32_t>(c.vocab_size));
  out->set_max_positions(static_cast<uint32_t>(std::min<int64_t>(c.max_positions, UINT32_MAX)));
  out->set_rope_theta(c.rope_theta);
  out->set_tie_embeddings(c.tie_embeddings);
  out->set_norm_eps(c.norm_eps);
  out->set_initializer_range(c.initializer_range);
  out->set_cesaro_alpha(c.cesaro_alpha);
  out->mutable_ablations()->set_no_position_encoding(c.ablations.no_position_encoding);
  out->mutable_ablations()->set_uniform_attention(c.ablations.uniform_attention);
  out->mutable_ablations()->set_no_mlp(c.ablations.no_mlp);
  // Norm, positions and activation from the family's row (architecture.h); none without one.
  const models::Architecture* a = models::ArchitectureOf(c.family);
  using Arch = models::Architecture;
  out->set_position_encoding(a == nullptr                                 ? v1::MODEL_POSITION_ENCODING_NONE
                             : a->positions == Arch::Positions::kLearned ? v1::MODEL_POSITION_ENCODING_LEARNED
                                                                         : v1::MODEL_POSITION_ENCODING_ROPE);
  out->set_norm(a == nullptr                               ? v1::MODEL_NORM_KIND_NONE
                : a->norm == Arch::Norm::kLayerNorm        ? v1::MODEL_NORM_KIND_LAYER_NORM
                : a->norm == Arch::Norm::kRmsNormOnePlus   ? v1::MODEL_NORM_KIND_RMS_NORM_ONE_PLUS
                                                           : v1::MODEL_NORM_KIND_RMS_NORM);
  out->set_activation(a == nullptr                           ? v1::MODEL_ACTIVATION_NONE
                      : a->mlp == Arch::Mlp::kGeluTanh      ? v1::MODEL_ACTIVATION_GELU_TANH
                      : a->mlp == Arch::Mlp::kGeluErf       ? v1::MODEL_ACTIVATION_GELU
                      : a->mlp == Arch::Mlp::kGeGluTanh     ? v1::MODEL_ACTIVATION_GEGLU_TANH
                                                            : v1::MODEL_ACTIVATION_SWIGLU);
  out->set_sliding_window(static_cast<uint32_t>(c.sliding_window));
  out->set_attention_bias(c.attention_bias);
  out->set_mlp_bias(c.mlp_bias);
  if (c.rope_scaling.type != models::RopeScaling::Type::kNone) {
    auto* scaling = out->mutable_rope_scaling();
    using Type = models::RopeScaling::Type;
    const Type type = c.rope_scaling.type;
    scaling->set_rope_type(type == Type::kLlama3 ? "llama3" : type == Type::kLongRope ? "longrope" : "linear");
    scaling->set_factor(c.rope_scaling.factor);
    if (type == Type::kLlama3) {
      scaling->set_low_freq_factor(c.rope_scaling.low_freq_factor);
      scaling->set_high_freq_factor(c.rope_scaling.high_freq_factor);
    }
    if (type == Type::kLlama3 || type == Type::kLongRope) {
      scaling->set_original_max_position_embeddings(static_cast<uint32_t>(c.rope_scaling.original_max_positions));
    }
    if (type == Type::kLongRope) {
      for (double f : c.rope_scaling.short_factor) scaling->add_short_factor(f);
      for (double f : c.rope_scaling.long_factor) scaling->add_long_factor(f);
      scaling->set_attention_factor(models::RotaryScaleOf(c));
    }
  }
  out->set_rotary_pct(a != nullptr && a->partial_rotary ? c.rotary_pct : 1.0);
  out->set_parallel_residual(a != nullptr && a->parallel_residual && c.parallel_residual);
  if (a != nullptr && a->positions == Arch::Positions::kRotary) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      out->add_sliding_layers(c.WindowOf(l) > 0);
      out->add_rotary_layers(c.RotatesAt(l));
    }
  }
  out->set_rope_local_theta(c.rope_local_theta);
  out->set_attention_scale(a != nullptr ? c.AttentionScale() : 0.0);
  out->set_attn_logit_softcapping(c.attn_logit_softcapping);
  out->set_final_logit_softcapping(c.final_logit_softcapping);
  const bool sqrt_width = a != nullptr && a->embedding_scale == Arch::EmbeddingScale::kSqrtWidthInEmbedding;
  out->set_embedding_multiplier(sqrt_width ? std::sqrt(static_cast<double>(c.hidden_size)) : c.embedding_multiplier);
  out->set_residual_multiplier(c.residual_multiplier);
  out->set_logits_scaling(c.logits_scaling);
}

void ModelToProto(const registry::ModelEntry& entry, int64_t active_jobs, v1::Model* out) {
  out->set_name(entry.name);
  out->set_tenant(entry.tenant);
  out->set_uid(entry.uid);
  out->set_generation(entry.generation);
  out->set_family(FamilyToProto(entry.config.family));
  ConfigToProto(entry.config, out->mutable_config());
  if (entry.source.kind == registry::SourceKind::kPreset) {
    out->mutable_source()->mutable_preset()->set_preset(entry.source.preset);
    out->mutable_source()->mutable_preset()->set_init_seed(entry.source.seed);
    out->mutable_source()->mutable_preset()->set_init_recipe(entry.init_recipe);
    out->mutable_source()->mutable_preset()->set_tokenizer_path(entry.source.tokenizer_path);
  } else if (entry.source.kind == registry::SourceKind::kCheckpoint) {
    out->mutable_source()->mutable_checkpoint()->set_path(entry.source.path);
  } else if (entry.source.kind == registry::SourceKind::kTorchScript) {
    out->mutable_source()->mutable_torchscript()->set_path(entry.source.path);
  } else if (entry.source.kind == registry::SourceKind::kUpload) {
    out->mutable_source()->mutable_upload();
  }
  out->mutable_init()->set_name(entry.init_recipe);
  out->mutable_init()->set_seed(entry.source.seed);
  out->set_state(entry.state == registry::ModelState::kReady ? v1::MODEL_STATE_READY
                 : entry.state == registry::ModelState::kFailed ? v1::MODEL_STATE_FAILED
                                                                : v1::MODEL_STATE_LOADING);
  if (entry.state == registry::ModelState::kFailed) {
    v1::ErrorReason reason = v1::INTERNAL_ERROR;
    v1::ErrorReason_Parse(entry.error_reason, &reason);
    out->mutable_error()->set_reason(reason);
    out->mutable_error()->set_message(entry.error_message);
  }
  out->set_weights_sha256(entry.weights_sha256);
  out->set_parameter_count(static_cast<uint64_t>(entry.parameters));
  out->set_memory_bytes(static_cast<uint64_t>(entry.memory_bytes));
  out->set_weights_dtype(v1::FLOAT32);
  *out->mutable_create_time() = google::protobuf::util::TimeUtil::MillisecondsToTimestamp(entry.created_ms);
  out->mutable_labels()->insert(entry.labels.begin(), entry.labels.end());
  out->set_builtin(entry.builtin);
  out->set_active_job_count(static_cast<uint32_t>(active_jobs));
  out->set_has_tokenizer(!entry.tokenizer_dir.empty());
  if (const auto& task = entry.trained_recall) {
    auto* trained = out->mutable_trained_recall();
    const auto range = [](const recall::IdRange& ids, v1::IdRange* range_out) {
      range_out->set_first(ids.first);
      range_out->set_last(ids.last);
    };
    range(task->keys, trained->mutable_token_ids()->mutable_key_ids());
    range(task->values, trained->mutable_token_ids()->mutable_value_ids());
    range(task->filler, trained->mutable_token_ids()->mutable_filler_ids());
    trained->set_pairs(static_cast<uint32_t>(task->pairs));
    trained->set_length(static_cast<uint32_t>(task->length));
  }
}

}  // namespace posbias::api
