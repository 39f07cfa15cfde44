// posbias.v1.ModelService over gRPC: the model registry (register, upload, get, list, delete,
// export, presets). Each method times the call, delegates, converts the status once, records.
#pragma once

#include <functional>

#include "posbias/v1/model_service.grpc.pb.h"
#include "server/metrics/metrics.h"
#include "server/registry/model_catalog.h"

namespace posbias::service {

class ModelServiceImpl final : public v1::ModelService::Service {
 public:
  // `active_jobs(name)` counts the queued and running jobs using a model.
  // `max_upload_bytes`: the largest upload, enforced while it streams.
  ModelServiceImpl(registry::ModelCatalog* catalog, std::function<int64_t(const std::string&)> active_jobs,
                   metrics::Metrics* metrics, int64_t max_upload_bytes = int64_t{16} << 30)
      : catalog_(catalog), active_jobs_(std::move(active_jobs)), metrics_(metrics), max_upload_bytes_(max_upload_bytes) {}

  grpc::Status RegisterModel(grpc::ServerContext*, const v1::RegisterModelRequest*, v1::Model*) override;
  grpc::Status UploadModel(grpc::ServerContext*, grpc::ServerReader<v1::UploadModelRequest>*, v1::Model*) override;
  grpc::Status GetModel(grpc::ServerContext*, const v1::GetModelRequest*, v1::Model*) override;
  grpc::Status ListModels(grpc::ServerContext*, const v1::ListModelsRequest*, v1::ListModelsResponse*) override;
  grpc::Status DeleteModel(grpc::ServerContext*, const v1::DeleteModelRequest*, v1::DeleteModelResponse*) override;
  grpc::Status ExportModel(grpc::ServerContext*, const v1::ExportModelRequest*,
                           grpc::ServerWriter<v1::ExportModelResponse>*) override;
  grpc::Status ListPresets(grpc::ServerContext*, const v1::ListPresetsRequest*, v1::ListPresetsResponse*) override;

 private:
  registry::ModelCatalog* catalog_;
  std::function<int64_t(const std::string&)> active_jobs_;
  metrics::Metrics* metrics_;
  int64_t max_upload_bytes_;
};

// Registry entry -> public Model message.
void ModelToProto(const registry::ModelEntry& entry, int64_t active_jobs, v1::Model* out);

}  // namespace posbias::service
