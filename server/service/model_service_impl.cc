#include "server/service/model_service_impl.h"

#include "server/service/unary_call.h"

namespace posbias::service {

grpc::ServerUnaryReactor* ModelServiceImpl::RegisterModel(grpc::CallbackServerContext* context,
                                                          const v1::RegisterModelRequest* request, v1::Model* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Register(caller, r); });
}

grpc::ServerReadReactor<v1::UploadModelRequest>* ModelServiceImpl::UploadModel(grpc::CallbackServerContext* context,
                                                                               v1::Model* response) {
  return transfers_.Upload(context, response);
}

grpc::ServerUnaryReactor* ModelServiceImpl::GetModel(grpc::CallbackServerContext* context,
                                                     const v1::GetModelRequest* request, v1::Model* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Get(caller, r); });
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListModels(grpc::CallbackServerContext* context,
                                                       const v1::ListModelsRequest* request,
                                                       v1::ListModelsResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.List(caller, r); });
}

grpc::ServerUnaryReactor* ModelServiceImpl::DeleteModel(grpc::CallbackServerContext* context,
                                                        const v1::DeleteModelRequest* request,
                                                        v1::DeleteModelResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Delete(caller, r); });
}

grpc::ServerWriteReactor<v1::ExportModelResponse>* ModelServiceImpl::ExportModel(grpc::CallbackServerContext* context,
                                                                                 const v1::ExportModelRequest* request) {
  return transfers_.Export(context, request);
}

grpc::ServerUnaryReactor* ModelServiceImpl::ListPresets(grpc::CallbackServerContext* context,
                                                        const v1::ListPresetsRequest* request, v1::ListPresetsResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller&, const auto& r) { return requests_.ListPresets(r); });
}

grpc::ServerUnaryReactor* ModelServiceImpl::Tokenize(grpc::CallbackServerContext* context,
                                                     const v1::TokenizeRequest* request, v1::TokenizeResponse* response) {
  return AnswerUnary(context, executor_, metrics_, auth_, request, response,
                [this](Caller& caller, const auto& r) { return requests_.Tokenize(caller, r); });
}

}  // namespace posbias::service
