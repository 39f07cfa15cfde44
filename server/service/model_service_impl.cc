#include "server/service/model_service_impl.h"


#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "server/admission/labels.h"
#include "server/admission/page_token.h"
#include "server/service/model_convert.h"
#include "server/service/model_visibility.h"
#include "server/service/unary_call.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {


v1::ModelFamily FamilyToProto(models::Family family) {
  switch (family) {
    case models::Family::kGpt2: return v1::MODEL_FAMILY_GPT2;
    case models::Family::kQwen2: return v1::MODEL_FAMILY_QWEN2;
    case models::Family::kCesaro: return v1::MODEL_FAMILY_CESARO;
    case models::Family::kTorchScript: return v1::MODEL_FAMILY_TORCHSCRIPT;
    case models::Family::kLlama: return v1::MODEL_FAMILY_LLAMA;
    case models::Family::kMistral: return v1::MODEL_FAMILY_MISTRAL;
    case models::Family::kGptNeoX: return v1::MODEL_FAMILY_GPT_NEOX;
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
  using models::Family;
  const bool weightless = c.family == Family::kCesaro || c.family == Family::kTorchScript;
  out->set_position_encoding(weightless                                ? v1::MODEL_POSITION_ENCODING_NONE
                             : c.family == Family::kGpt2               ? v1::MODEL_POSITION_ENCODING_LEARNED
                                                                       : v1::MODEL_POSITION_ENCODING_ROPE);
  out->set_norm(weightless ? v1::MODEL_NORM_KIND_NONE
                : c.family == Family::kGpt2 || c.family == Family::kGptNeoX ? v1::MODEL_NORM_KIND_LAYER_NORM
                                                                            : v1::MODEL_NORM_KIND_RMS_NORM);
  out->set_activation(weightless                      ? v1::MODEL_ACTIVATION_NONE
                      : c.family == Family::kGpt2     ? v1::MODEL_ACTIVATION_GELU_TANH
                      : c.family == Family::kGptNeoX  ? v1::MODEL_ACTIVATION_GELU
                                                      : v1::MODEL_ACTIVATION_SWIGLU);
  out->set_sliding_window(static_cast<uint32_t>(c.sliding_window));
  out->set_attention_bias(c.attention_bias);
  out->set_mlp_bias(c.mlp_bias);
  if (c.rope_scaling.type != models::RopeScaling::Type::kNone) {
    auto* scaling = out->mutable_rope_scaling();
    const bool llama3 = c.rope_scaling.type == models::RopeScaling::Type::kLlama3;
    scaling->set_rope_type(llama3 ? "llama3" : "linear");
    scaling->set_factor(c.rope_scaling.factor);
    if (llama3) {
      scaling->set_low_freq_factor(c.rope_scaling.low_freq_factor);
      scaling->set_high_freq_factor(c.rope_scaling.high_freq_factor);
      scaling->set_original_max_position_embeddings(static_cast<uint32_t>(c.rope_scaling.original_max_positions));
    }
  }
  out->set_rotary_pct(c.family == Family::kGptNeoX ? c.rotary_pct : 1.0);
  out->set_parallel_residual(c.family == Family::kGptNeoX && c.parallel_residual);
}

absl::StatusOr<v1::Model> Register(registry::ModelCatalog& catalog, Caller& caller,
                                   const v1::RegisterModelRequest& request) {
  auto registration = RegistrationFromRequest(request);
  if (!registration.ok()) return registration.status();
  caller.resource = registration->name;
  auto entry = catalog.Register(registration->name, registration->source, registration->labels, registration->request_id,
                                ModelTenantOf(caller));
  if (!entry.ok()) return entry.status();
  v1::Model model;
  ModelToProto(*entry, 0, &model);
  return model;
}

}  // namespace

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
}

grpc::ServerUnaryReactor* ModelServiceImpl::RegisterModel(grpc::CallbackServerContext* context,
                                                          const v1::RegisterModelRequest* request, v1::Model* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=, this](Caller& caller) {
    auto model = Register(*catalog_, caller, *request);
    if (model.ok()) *response = *std::move(model);
    return model.status();
  });
}

grpc::ServerReadReactor<v1::UploadModelRequest>* ModelServiceImpl::UploadModel(grpc::CallbackServerContext* context,
                                                                               v1::Model* response) {
  return transfers_.Upload(context, response);
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request, v1::Model* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=, this](Caller& caller) {
    auto entry = FindVisibleModel(*catalog_, caller, request->name());
    if (entry.ok()) ModelToProto(*entry, ActiveJobs(caller, *entry), response);
    return entry.status();
  });
}

absl::Status ModelServiceImpl::List(const Caller& caller, const v1::ListModelsRequest& request,
                                    v1::ListModelsResponse* response) {
  const uint32_t page_size = request.page_size() == 0 ? 50 : std::min<uint32_t>(request.page_size(), 1000);
  auto terms = admission::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return terms.status();
  const std::string selection = absl::StrCat(request.family(), "|", request.label_selector(), "|",
                                             caller.principal.admin() ? "*" : caller.tenant());
  auto after = admission::RedeemPageToken(request.page_token(), "ListModels", selection);
  if (!after.ok()) return after.status();
  std::vector<registry::ModelEntry> matching;
  for (const auto& entry : catalog_->List()) {  // Sorted by path ("name", "tenant/name").
    if (request.family() != v1::MODEL_FAMILY_UNSPECIFIED && FamilyToProto(entry.config.family) != request.family()) continue;
    if (!admission::MatchesLabels(entry.labels, *terms)) continue;
    if (!SeesModel(caller, entry)) continue;
    if (!after->empty() && registry::ModelPath(entry) <= *after) continue;
    matching.push_back(entry);
  }
  for (size_t i = 0; i < matching.size() && i < page_size; ++i) {
    ModelToProto(matching[i], ActiveJobs(caller, matching[i]), response->add_models());
  }
  if (matching.size() > page_size) {
    response->set_next_page_token(
        admission::IssuePageToken("ListModels", selection, registry::ModelPath(matching[page_size - 1])));
  }
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request,
                  [=, this](Caller& caller) { return List(caller, *request, response); });
}

int64_t ModelServiceImpl::ActiveJobs(const Caller& caller, const registry::ModelEntry& model) const {
  return jobs_.active(model, caller.principal.admin() ? std::nullopt : std::optional<std::string>(caller.tenant()));
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* context,
                                                        const v1::DeleteModelRequest* request,
                                                        v1::DeleteModelResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=, this](Caller& caller) {
    caller.resource = request->name();
    auto entry = FindVisibleModel(*catalog_, caller, request->name());
    if (!entry.ok()) return entry.status();
    if (entry->tenant.empty() && !entry->builtin && !caller.principal.admin()) {
      return ErrorWithReason(absl::StatusCode::kPermissionDenied, ErrorReason::kRoleRequired,
                             absl::StrCat(request->name(), " is a public model: deleting it needs the role admin"));
    }
    // In use by anyone's jobs: a public model's users are every tenant.
    if (auto deleted = catalog_->Delete(registry::ModelPath(*entry), request->force(), jobs_.active(*entry, std::nullopt));
        !deleted.ok()) {
      return deleted;
    }
    // Jobs bound to this registration fail at their start anyway (MODEL_NOT_FOUND); force ends
    // them now and says which.
    if (request->force()) {
      for (const std::string& id : jobs_.cancel(*entry)) response->add_cancelled_job_ids(id);
    }
    return absl::OkStatus();
  });
}

grpc::ServerWriteReactor<v1::ExportModelResponse>* ModelServiceImpl::ExportModel(grpc::CallbackServerContext* context,
                                                                                 const v1::ExportModelRequest* request) {
  return transfers_.Export(context, request);
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListPresets(grpc::CallbackServerContext* context,
                                                        const v1::ListPresetsRequest* request, v1::ListPresetsResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=] {
    for (const std::string& name : models::PresetNames()) {
      auto* preset = response->add_presets();
      preset->set_name(name);
      const models::ModelConfig config = *models::PresetConfig(name);
      ConfigToProto(config, preset->mutable_config());
      preset->set_test_preset(name.find("tiny") != std::string::npos);
      const auto parameters = static_cast<uint64_t>(models::EstimatedParameters(config));
      preset->set_parameter_count(parameters);
      preset->set_memory_bytes(parameters * 4);  // Float32.

    }
    return absl::OkStatus();
  });
}

grpc::ServerUnaryReactor* ModelServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request, v1::TokenizeResponse* response) {
  return RunUnary(context, executor_, metrics_, auth_, *request, [=, this](Caller& caller) {
    auto entry = FindVisibleModel(*catalog_, caller, request->model());
    if (!entry.ok()) return entry.status();
    auto tokenizer = tokenizers_.For(*entry);
    if (!tokenizer.ok()) return tokenizer.status();
    return RunTokenize(**tokenizer, *request, response);
  });
}

}  // namespace posbias::service
