#include "server/service/model_service_impl.h"


#include <google/protobuf/util/time_util.h>

#include "absl/strings/str_cat.h"
#include "server/admission/labels.h"
#include "server/service/unary_call.h"
#include "server/status/error.h"

namespace posbias::service {
namespace {

constexpr char kPrefix[] = "/posbias.v1.ModelService/";

v1::ModelFamily FamilyToProto(models::Family family) {
  switch (family) {
    case models::Family::kGpt2: return v1::MODEL_FAMILY_GPT2;
    case models::Family::kQwen2: return v1::MODEL_FAMILY_QWEN2;
    case models::Family::kCesaro: return v1::MODEL_FAMILY_CESARO;
    case models::Family::kTorchScript: return v1::MODEL_FAMILY_TORCHSCRIPT;
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
}

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
  return overrides;
}

models::Ablations AblationsFromProto(const v1::ModelAblations& a) {
  models::Ablations ablations;
  ablations.no_position_encoding = a.no_position_encoding();
  ablations.uniform_attention = a.uniform_attention();
  ablations.no_mlp = a.no_mlp();
  return ablations;
}

absl::StatusOr<v1::Model> Register(registry::ModelCatalog& catalog, const v1::RegisterModelRequest& request) {
  registry::ModelSource source;
  if (request.has_preset()) {
    source.kind = registry::SourceKind::kPreset;
    source.preset = request.preset().preset();
    source.overrides = OverridesFromProto(request.preset().overrides());
    source.seed = request.preset().has_init_seed() ? request.preset().init_seed() : 0;
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
  const std::map<std::string, std::string> labels(request.labels().begin(), request.labels().end());
  if (auto status = admission::CheckLabels(labels); !status.ok()) return status;
  if (auto status = admission::CheckRequestId(request.request_id()); !status.ok()) return status;
  auto entry = catalog.Register(request.name(), source, labels, request.request_id());
  if (!entry.ok()) return entry.status();
  v1::Model model;
  ModelToProto(*entry, 0, &model);
  return model;
}

}  // namespace

void ModelToProto(const registry::ModelEntry& entry, int64_t active_jobs, v1::Model* out) {
  out->set_name(entry.name);
  out->set_family(FamilyToProto(entry.config.family));
  ConfigToProto(entry.config, out->mutable_config());
  if (entry.source.kind == registry::SourceKind::kPreset) {
    out->mutable_source()->mutable_preset()->set_preset(entry.source.preset);
    out->mutable_source()->mutable_preset()->set_init_seed(entry.source.seed);
    out->mutable_source()->mutable_preset()->set_init_recipe(entry.init_recipe);
  } else if (entry.source.kind == registry::SourceKind::kCheckpoint) {
    out->mutable_source()->mutable_checkpoint()->set_path(entry.source.path);
  } else if (entry.source.kind == registry::SourceKind::kTorchScript) {
    out->mutable_source()->mutable_torchscript()->set_path(entry.source.path);
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
}

grpc::ServerUnaryReactor* ModelServiceImpl::RegisterModel(grpc::CallbackServerContext* context,
                                                          const v1::RegisterModelRequest* request, v1::Model* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "RegisterModel", [=, this] {
    auto model = Register(*catalog_, *request);
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
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "GetModel", [=, this] {
    auto entry = catalog_->Get(request->name());
    if (entry.ok()) ModelToProto(*entry, active_jobs_(entry->name), response);
    return entry.status();
  });
}

absl::Status ModelServiceImpl::List(const v1::ListModelsRequest& request, v1::ListModelsResponse* response) {
  const uint32_t page_size = request.page_size() == 0 ? 50 : std::min<uint32_t>(request.page_size(), 1000);
  auto terms = admission::ParseLabelSelector(request.label_selector());
  if (!terms.ok()) return terms.status();
  std::vector<registry::ModelEntry> matching;
  for (const auto& entry : catalog_->List()) {  // Sorted by name.
    if (request.family() != v1::MODEL_FAMILY_UNSPECIFIED && FamilyToProto(entry.config.family) != request.family()) continue;
    if (!admission::MatchesLabels(entry.labels, *terms)) continue;
    if (!request.page_token().empty() && entry.name <= request.page_token()) continue;
    matching.push_back(entry);
  }
  for (size_t i = 0; i < matching.size() && i < page_size; ++i) {
    ModelToProto(matching[i], active_jobs_(matching[i].name), response->add_models());
  }
  if (matching.size() > page_size) response->set_next_page_token(matching[page_size - 1].name);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "ListModels",
                  [=, this] { return List(*request, response); });
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* context,
                                                        const v1::DeleteModelRequest* request, v1::DeleteModelResponse*) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "DeleteModel", [=, this] {
    return catalog_->Delete(request->name(), request->force(), active_jobs_(request->name()));
  });
}

grpc::ServerWriteReactor<v1::ExportModelResponse>* ModelServiceImpl::ExportModel(grpc::CallbackServerContext* context,
                                                                                 const v1::ExportModelRequest* request) {
  return transfers_.Export(context, request);
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListPresets(grpc::CallbackServerContext* context,
                                                        const v1::ListPresetsRequest*, v1::ListPresetsResponse* response) {
  return RunUnary(context, executor_, metrics_, std::string(kPrefix) + "ListPresets", [=] {
    for (const std::string& name : models::PresetNames()) {
      auto* preset = response->add_presets();
      preset->set_name(name);
      ConfigToProto(*models::PresetConfig(name), preset->mutable_config());
      preset->set_test_preset(name.find("tiny") != std::string::npos);
    }
    return absl::OkStatus();
  });
}

}  // namespace posbias::service
