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
//
// Security (TLS, mTLS, a bearer token) is ClientOptions::security; when it names a PEM file that
// cannot be read, the Client is built anyway and every call returns that error (status() reads it
// up front):
//
//   posbias::Client client({.target = "posbias.example:50051",
//                           .security = {.token = "s3cr3t", .ca_file = "ca.pem"}});
//   if (!client.status().ok()) { /* e.g. "cannot read the CA file ca.pem: No such file..." */ }
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

  // Transport security and authentication, the client side of the server's TLS, mTLS and token
  // options. All empty = plaintext and no token, the server's default.
  struct Security {
    // Bearer token: every call, unary and streaming, sends the metadata
    // `authorization: Bearer <token>`. Sent over plaintext too (loopback development, a service
    // mesh that terminates TLS); anywhere else pair it with TLS. Printable ASCII, no spaces.
    std::string token = {};
    // TLS, verifying the server's certificate against the system roots (or ca_file).
    bool tls = false;
    // PEM file of the root certificate(s) that verify the server instead of the system roots.
    // Implies TLS.
    std::string ca_file = {};
    // PEM files of the client's certificate (chain) and its private key, presented for mTLS; both
    // or neither. Implies TLS.
    std::string cert_file = {};
    std::string key_file = {};
    // The name checked against the server certificate instead of the target's host (e.g. a
    // certificate for "posbias.internal" served at 10.0.0.7:50051); the channel argument
    // GRPC_SSL_TARGET_NAME_OVERRIDE_ARG. Implies TLS.
    std::string tls_server_name = {};

    // Whether any of the above asks for TLS.
    bool UsesTls() const {
      return tls || !ca_file.empty() || !cert_file.empty() || !key_file.empty() ||
             !tls_server_name.empty();
    }
  };
  // When `credentials` is set, those are used as given and tls, ca_file, cert_file and key_file are
  // ignored; tls_server_name and the token still apply.
  Security security = {};
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
  // For tests and embedding: an existing channel (the options' limits, credentials and TLS
  // settings are not used; security.token still is).
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
  absl::StatusOr<v1::TokenizeResponse> Tokenize(const v1::TokenizeRequest& request, CallSettings settings = {});

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
  // The caller's principal, tenant and role, and its job quotas next to what it uses now.
  absl::StatusOr<v1::Quota> GetQuota(const v1::GetQuotaRequest& request = {}, CallSettings settings = {});

  // Null when status() is not OK.
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  // Why the channel could not be built (an unreadable or malformed PEM file, a certificate without
  // its key, a token with spaces); OK otherwise. Every call returns this error when it is not OK.
  const absl::Status& status() const { return status_; }

 private:
  void Prepare(grpc::ClientContext& context, const CallSettings& settings) const;

  ClientOptions options_;
  absl::Status status_;
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

// Channel credentials for `security`: insecure unless it asks for TLS; otherwise SSL credentials
// with the PEM files' contents (the system roots when ca_file is empty). InvalidArgument for a
// certificate without its key (or the reverse), NotFound / PermissionDenied / InvalidArgument for a
// PEM file that is missing, unreadable or not PEM; the message names the file. The token is not
// part of them: Client sends it as call metadata (gRPC refuses call credentials over plaintext).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const ClientOptions::Security& security);

// "host:port" -> a channel with the options' limits and credentials (`credentials` when set, else
// MakeCredentials(security)); the errors of MakeCredentials, or InvalidArgument for a bad token.
absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options);

// The metadata every call of a Client with `token` carries: {"authorization", "Bearer <token>"}.
inline constexpr char kAuthorizationHeader[] = "authorization";
std::string BearerValue(const std::string& token);

}  // namespace posbias
