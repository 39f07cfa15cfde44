// posbias.v1.ModelService over gRPC's callback API: wiring only. The unary calls' logic is
// ModelRequests (model_requests.h, gRPC-free) and runs on the call executor; the streams are
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
#include "server/service/model_requests.h"
#include "server/service/model_transfers.h"
#include "server/text/tokenizers.h"

namespace posbias::service {

class ModelServiceImpl final : public v1::ModelService::CallbackService {
 public:
  using Jobs = ModelRequests::Jobs;
  ModelServiceImpl(registry::ModelCatalog* catalog, Jobs jobs, metrics::Metrics* metrics,
                   ModelTransfers::Options transfer_options = {})
      : metrics_(metrics), requests_(catalog, std::move(jobs)), transfers_(catalog, metrics, transfer_options) {}
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
  text::Tokenizers* tokenizers() { return requests_.tokenizers(); }

 private:
  metrics::Metrics* metrics_;
  ModelRequests requests_;  // The unary calls' logic (model_requests.h); this class only wires it.
  ModelTransfers transfers_;
  CallExecutor* executor_ = nullptr;
  const CallAuth* auth_ = nullptr;
};

}  // namespace posbias::service
