// posbias.v1.ModelService over gRPC's callback API: the model catalog (register, upload, get,
// list, delete, export, presets). Unary calls run on the call executor; the streams are
// model_transfers.h's reactors.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "posbias/v1/model_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"
#include "server/service/call_auth.h"
#include "server/service/call_executor.h"
#include "server/service/model_transfers.h"
#include "server/service/tokenizers.h"

namespace posbias::service {

class ModelServiceImpl final : public v1::ModelService::CallbackService {
 public:
  // What the model service asks of the job store.
  struct Jobs {
    // Queued, running and cancelling jobs bound to the registration (of the tenant when given).
    std::function<int64_t(const registry::ModelEntry& model, const std::optional<std::string>& tenant)> active;
    // Cancels the queued and running jobs bound to the registration (DeleteModel with force);
    // the ids cancelled.
    std::function<std::vector<std::string>(const registry::ModelEntry& model)> cancel;
  };
  ModelServiceImpl(registry::ModelCatalog* catalog, Jobs jobs, metrics::Metrics* metrics,
                   ModelTransfers::Options transfer_options = {})
      : catalog_(catalog), jobs_(std::move(jobs)), metrics_(metrics), transfers_(catalog, metrics, transfer_options) {}
  // Where the calls' work runs (set before the server starts).
  void Start(CallExecutor* executor, const CallAuth* auth) {
    executor_ = executor;
    auth_ = auth;
    transfers_.Start(executor, auth);
  }
  // Ends open uploads (server shutdown).
  void Shutdown() { transfers_.Stop(); }

  grpc::ServerUnaryReactor* RegisterModel(grpc::CallbackServerContext*, const v1::RegisterModelRequest*,
                                          v1::Model*) override;
  grpc::ServerReadReactor<v1::UploadModelRequest>* UploadModel(grpc::CallbackServerContext*, v1::Model*) override;
  grpc::ServerUnaryReactor* GetModel(grpc::CallbackServerContext*, const v1::GetModelRequest*, v1::Model*) override;
  grpc::ServerUnaryReactor* ListModels(grpc::CallbackServerContext*, const v1::ListModelsRequest*,
                                       v1::ListModelsResponse*) override;
  grpc::ServerUnaryReactor* DeleteModel(grpc::CallbackServerContext*, const v1::DeleteModelRequest*,
                                        v1::DeleteModelResponse*) override;
  grpc::ServerWriteReactor<v1::ExportModelResponse>* ExportModel(grpc::CallbackServerContext*,
                                                                 const v1::ExportModelRequest*) override;
  grpc::ServerUnaryReactor* ListPresets(grpc::CallbackServerContext*, const v1::ListPresetsRequest*,
                                        v1::ListPresetsResponse*) override;
  grpc::ServerUnaryReactor* Tokenize(grpc::CallbackServerContext*, const v1::TokenizeRequest*,
                                     v1::TokenizeResponse*) override;
  // The tokenizers of registered models (shared with the job service's text inputs).
  Tokenizers* tokenizers() { return &tokenizers_; }

 private:
  absl::Status List(const Caller& caller, const v1::ListModelsRequest& request, v1::ListModelsResponse* response);

  registry::ModelCatalog* catalog_;
  // Active jobs on a model as the caller may count them: its tenant's, or everyone's for an admin.
  int64_t ActiveJobs(const Caller& caller, const registry::ModelEntry& model) const;

  Jobs jobs_;
  metrics::Metrics* metrics_;
  ModelTransfers transfers_;
  CallExecutor* executor_ = nullptr;
  const CallAuth* auth_ = nullptr;
  Tokenizers tokenizers_;
};

// Registry entry -> public Model message.
void ModelToProto(const registry::ModelEntry& entry, int64_t active_jobs, v1::Model* out);

}  // namespace posbias::service
