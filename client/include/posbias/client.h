// posbias::Client: a thin C++ client for the posbias v1 gRPC API, one method per RPC.
//
// Every method takes the request message and optional per-call settings, and returns the response or
// an absl::Status carrying the gRPC code and message; ErrorReason() reads the server's stable
// machine-readable reason (e.g. "INVALID_DEPTH") from a failed status. Thread-safe: one Client can
// be shared by many threads (it holds one channel).
//
//   posbias::Client client({.target = "127.0.0.1:50051"});
//   posbias::v1::EvaluateContinuumRequest request;
//   request.mutable_model()->set_depth(24);
//   request.mutable_model()->set_alpha(0.5);
//   request.mutable_point_list()->add_x(0.5);
//   auto response = client.EvaluateContinuum(request);
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "posbias/v1/density_service.grpc.pb.h"
#include "posbias/v1/job_service.grpc.pb.h"
#include "posbias/v1/model_service.grpc.pb.h"

namespace posbias {

struct ClientOptions {
  // gRPC target, e.g. "127.0.0.1:50051" or "dns:///posbias.example:50051".
  std::string target = "127.0.0.1:50051";
  // Deadline of each call unless CallSettings overrides it; zero = no deadline.
  std::chrono::milliseconds default_timeout{30'000};
  // Largest message received or sent, in bytes (responses of discrete profiles can be large).
  int max_message_bytes = 64 << 20;
  // Channel credentials; null = insecure (plaintext), the server's default.
  std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
  // Extra channel arguments (keepalive, load balancing, ...), applied after the ones above.
  grpc::ChannelArguments channel_arguments = {};
};

struct CallSettings {
  // Overrides the default timeout when positive.
  std::chrono::milliseconds timeout{0};
  // Waits for the channel to become ready instead of failing fast when the server is not up.
  bool wait_for_ready = false;
};

// Health of the server ("" = overall) or of one service, per grpc.health.v1.
enum class ServingStatus { kUnknown, kServing, kNotServing, kServiceUnknown };

class Client {
 public:
  explicit Client(ClientOptions options);
  // For tests and embedding: an existing channel.
  Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options);

  // grpc.health.v1.Health/Check.
  absl::StatusOr<ServingStatus> Check(const std::string& service = "", CallSettings settings = {});

  // posbias.v1.DensityService
  absl::StatusOr<v1::EvaluateContinuumResponse> EvaluateContinuum(
      const v1::EvaluateContinuumRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::EvaluateDiscreteResponse> EvaluateDiscrete(
      const v1::EvaluateDiscreteRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::SummarizeProfileResponse> SummarizeProfile(
      const v1::SummarizeProfileRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::FitProfileResponse> FitProfile(const v1::FitProfileRequest& request,
                                                    CallSettings settings = {});

  // posbias.v1.ModelService
  absl::StatusOr<v1::Model> RegisterModel(const v1::RegisterModelRequest& request,
                                          CallSettings settings = {});
  // Sends `messages` in order (metadata first, then chunks) and returns the registered model.
  absl::StatusOr<v1::Model> UploadModel(const std::vector<v1::UploadModelRequest>& messages,
                                        CallSettings settings = {});
  absl::StatusOr<v1::Model> GetModel(const v1::GetModelRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::ListModelsResponse> ListModels(const v1::ListModelsRequest& request,
                                                    CallSettings settings = {});
  absl::StatusOr<v1::DeleteModelResponse> DeleteModel(const v1::DeleteModelRequest& request,
                                                      CallSettings settings = {});
  // Calls `on_message` for each streamed message; returning false stops the stream early.
  absl::Status ExportModel(const v1::ExportModelRequest& request,
                           const std::function<bool(const v1::ExportModelResponse&)>& on_message,
                           CallSettings settings = {});
  absl::StatusOr<v1::ListPresetsResponse> ListPresets(const v1::ListPresetsRequest& request,
                                                      CallSettings settings = {});

  // posbias.v1.JobService
  absl::StatusOr<v1::Job> SubmitJob(const v1::SubmitJobRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::Job> GetJob(const v1::GetJobRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::ListJobsResponse> ListJobs(const v1::ListJobsRequest& request,
                                                CallSettings settings = {});
  absl::StatusOr<v1::Job> CancelJob(const v1::CancelJobRequest& request, CallSettings settings = {});
  absl::StatusOr<v1::DeleteJobResponse> DeleteJob(const v1::DeleteJobRequest& request,
                                                  CallSettings settings = {});
  absl::Status WatchJob(const v1::WatchJobRequest& request,
                        const std::function<bool(const v1::WatchJobResponse&)>& on_message,
                        CallSettings settings = {});
  absl::StatusOr<v1::GetJobResultResponse> GetJobResult(const v1::GetJobResultRequest& request,
                                                        CallSettings settings = {});

  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }

 private:
  void Prepare(grpc::ClientContext& context, const CallSettings& settings) const;

  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::DensityService::Stub> density_;
  std::unique_ptr<v1::ModelService::Stub> models_;
  std::unique_ptr<v1::JobService::Stub> jobs_;
  std::unique_ptr<grpc::health::v1::Health::Stub> health_;
};

// The server's ErrorReason name for a failed call ("" when the server sent none).
std::string ErrorReason(const absl::Status& status);
// The field the server named as at fault ("" when none).
std::string ErrorField(const absl::Status& status);

// "host:port" -> a channel with the options' limits and credentials.
std::shared_ptr<grpc::Channel> MakeChannel(const ClientOptions& options);

}  // namespace posbias
