#include "posbias/client.h"

#include <cerrno>
#include <cstdio>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "posbias/v1/common.pb.h"

namespace posbias {
namespace {

constexpr char kReasonUrl[] = "type.posbias.dev/reason";
constexpr char kFieldUrl[] = "type.posbias.dev/field";

// gRPC status + trailing metadata -> absl::Status with the reason and field as payloads.
absl::Status FromGrpc(const grpc::Status& status, const grpc::ClientContext& context) {
  if (status.ok()) return absl::OkStatus();
  absl::Status result(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
  const auto& trailers = context.GetServerTrailingMetadata();
  if (auto it = trailers.find("posbias-error-bin"); it != trailers.end()) {
    v1::ErrorDetail detail;
    if (detail.ParseFromArray(it->second.data(), static_cast<int>(it->second.size()))) {
      result.SetPayload(kReasonUrl, absl::Cord(v1::ErrorReason_Name(detail.reason())));
      result.SetPayload(kFieldUrl, absl::Cord(detail.field()));
    }
  }
  return result;
}

template <typename Response, typename Call>
absl::StatusOr<Response> Unary(grpc::ClientContext& context, Call&& call) {
  Response response;
  const grpc::Status status = call(&context, &response);
  if (!status.ok()) return FromGrpc(status, context);
  return response;
}

template <typename Message>
absl::Status ReadStream(grpc::ClientContext& context, grpc::ClientReaderInterface<Message>& reader,
                        const std::function<bool(const Message&)>& on_message) {
  Message message;
  bool stopped = false;
  while (reader.Read(&message)) {
    if (!on_message(message)) {
      context.TryCancel();
      stopped = true;
      break;
    }
  }
  const grpc::Status status = reader.Finish();
  if (status.error_code() == grpc::StatusCode::CANCELLED && stopped) {
    return absl::OkStatus();  // We stopped it.
  }
  return FromGrpc(status, context);
}

// The contents of the PEM file `path` (`what` names it in errors: "CA file", ...).
absl::StatusOr<std::string> ReadPem(const std::string& path, absl::string_view what) {
  const std::string context = absl::StrCat("cannot read the ", what, " ", path);
  std::FILE* file = std::fopen(path.c_str(), "rb");
  if (file == nullptr) return absl::ErrnoToStatus(errno, context);
  std::string contents;
  char buffer[4096];
  std::size_t read = 0;
  while ((read = std::fread(buffer, 1, sizeof buffer, file)) > 0) contents.append(buffer, read);
  const int error = std::ferror(file) ? errno : 0;
  std::fclose(file);
  if (error != 0) return absl::ErrnoToStatus(error, context);
  if (contents.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", what, " ", path, " is not PEM (no \"-----BEGIN\" line)"));
  }
  return contents;
}

// Metadata values must be printable ASCII; a token with a space or a newline (a file read with its
// trailing newline) would be cut or refused by gRPC later, less clearly.
absl::Status CheckToken(const std::string& token) {
  for (const char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "the token must be printable ASCII without spaces or newlines");
    }
  }
  return absl::OkStatus();
}

}  // namespace

std::string BearerValue(const std::string& token) { return "Bearer " + token; }

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeCredentials(
    const ClientOptions::Security& security) {
  if (!security.UsesTls()) return grpc::InsecureChannelCredentials();
  if (security.cert_file.empty() != security.key_file.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs both the certificate file and the key file");
  }
  grpc::SslCredentialsOptions ssl;
  if (!security.ca_file.empty()) {
    auto roots = ReadPem(security.ca_file, "CA file");
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *std::move(roots);
  }
  if (!security.cert_file.empty()) {
    auto chain = ReadPem(security.cert_file, "certificate file");
    if (!chain.ok()) return chain.status();
    auto key = ReadPem(security.key_file, "key file");
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(chain);
    ssl.pem_private_key = *std::move(key);
  }
  auto credentials = grpc::SslCredentials(ssl);
  if (credentials == nullptr) return absl::InternalError("gRPC could not build TLS credentials");
  return credentials;
}

absl::StatusOr<std::shared_ptr<grpc::Channel>> MakeChannel(const ClientOptions& options) {
  if (absl::Status token = CheckToken(options.security.token); !token.ok()) return token;
  std::shared_ptr<grpc::ChannelCredentials> credentials = options.credentials;
  if (credentials == nullptr) {
    auto made = MakeCredentials(options.security);
    if (!made.ok()) return made.status();
    credentials = *std::move(made);
  }
  grpc::ChannelArguments arguments = options.channel_arguments;
  arguments.SetMaxReceiveMessageSize(options.max_message_bytes);
  arguments.SetMaxSendMessageSize(options.max_message_bytes);
  if (!options.security.tls_server_name.empty()) {
    arguments.SetSslTargetNameOverride(options.security.tls_server_name);
  }
  return grpc::CreateCustomChannel(options.target, credentials, arguments);
}

Client::Client(ClientOptions options) : options_(std::move(options)) {
  auto channel = MakeChannel(options_);
  if (!channel.ok()) {
    status_ = channel.status();
    return;  // No channel and no stubs: every call returns status_ first.
  }
  channel_ = *std::move(channel);
  density_ = v1::DensityService::NewStub(channel_);
  models_ = v1::ModelService::NewStub(channel_);
  jobs_ = v1::JobService::NewStub(channel_);
  health_ = grpc::health::v1::Health::NewStub(channel_);
}

Client::Client(std::shared_ptr<grpc::Channel> channel, ClientOptions options)
    : options_(std::move(options)),
      channel_(std::move(channel)),
      density_(v1::DensityService::NewStub(channel_)),
      models_(v1::ModelService::NewStub(channel_)),
      jobs_(v1::JobService::NewStub(channel_)),
      health_(grpc::health::v1::Health::NewStub(channel_)) {
  status_ = CheckToken(options_.security.token);
}

// The one place every call's context is set up: the deadline, wait-for-ready and the token.
void Client::Prepare(grpc::ClientContext& context, const CallSettings& settings) const {
  const auto timeout = settings.timeout.count() > 0 ? settings.timeout : options_.default_timeout;
  if (timeout.count() > 0) context.set_deadline(std::chrono::system_clock::now() + timeout);
  context.set_wait_for_ready(settings.wait_for_ready);
  if (!options_.security.token.empty()) {
    context.AddMetadata(kAuthorizationHeader, BearerValue(options_.security.token));
  }
}

absl::StatusOr<ServingStatus> Client::Check(const std::string& service, CallSettings settings) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  Prepare(context, settings);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health_->Check(&context, request, &response);
  if (!status.ok()) return FromGrpc(status, context);
  switch (response.status()) {
    case grpc::health::v1::HealthCheckResponse::SERVING: return ServingStatus::kServing;
    case grpc::health::v1::HealthCheckResponse::NOT_SERVING: return ServingStatus::kNotServing;
    case grpc::health::v1::HealthCheckResponse::SERVICE_UNKNOWN: return ServingStatus::kServiceUnknown;
    default: return ServingStatus::kUnknown;
  }
}

#define POSBIAS_UNARY(Method, Stub, Request, Response)                                      \
  absl::StatusOr<Response> Client::Method(const Request& request, CallSettings settings) { \
    if (!status_.ok()) return status_;                                                     \
    grpc::ClientContext context;                                                           \
    Prepare(context, settings);                                                            \
    return Unary<Response>(context, [&](grpc::ClientContext* c, Response* r) {            \
      return Stub->Method(c, request, r);                                                  \
    });                                                                                    \
  }

POSBIAS_UNARY(EvaluateContinuum, density_, v1::EvaluateContinuumRequest, v1::EvaluateContinuumResponse)
POSBIAS_UNARY(EvaluateDiscrete, density_, v1::EvaluateDiscreteRequest, v1::EvaluateDiscreteResponse)
POSBIAS_UNARY(SummarizeProfile, density_, v1::SummarizeProfileRequest, v1::SummarizeProfileResponse)
POSBIAS_UNARY(FitProfile, density_, v1::FitProfileRequest, v1::FitProfileResponse)
POSBIAS_UNARY(RegisterModel, models_, v1::RegisterModelRequest, v1::Model)
POSBIAS_UNARY(GetModel, models_, v1::GetModelRequest, v1::Model)
POSBIAS_UNARY(ListModels, models_, v1::ListModelsRequest, v1::ListModelsResponse)
POSBIAS_UNARY(DeleteModel, models_, v1::DeleteModelRequest, v1::DeleteModelResponse)
POSBIAS_UNARY(ListPresets, models_, v1::ListPresetsRequest, v1::ListPresetsResponse)
POSBIAS_UNARY(Tokenize, models_, v1::TokenizeRequest, v1::TokenizeResponse)
POSBIAS_UNARY(SubmitJob, jobs_, v1::SubmitJobRequest, v1::Job)
POSBIAS_UNARY(GetJob, jobs_, v1::GetJobRequest, v1::Job)
POSBIAS_UNARY(ListJobs, jobs_, v1::ListJobsRequest, v1::ListJobsResponse)
POSBIAS_UNARY(CancelJob, jobs_, v1::CancelJobRequest, v1::Job)
POSBIAS_UNARY(DeleteJob, jobs_, v1::DeleteJobRequest, v1::DeleteJobResponse)
POSBIAS_UNARY(GetJobResult, jobs_, v1::GetJobResultRequest, v1::GetJobResultResponse)
POSBIAS_UNARY(GetQuota, jobs_, v1::GetQuotaRequest, v1::Quota)
#undef POSBIAS_UNARY

absl::StatusOr<v1::Model> Client::UploadModel(const std::vector<v1::UploadModelRequest>& messages,
                                              CallSettings settings) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  Prepare(context, settings);
  v1::Model model;
  auto writer = models_->UploadModel(&context, &model);
  for (const auto& message : messages) {
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpc(status, context);
  return model;
}

absl::Status Client::ExportModel(
    const v1::ExportModelRequest& request,
    const std::function<bool(const v1::ExportModelResponse&)>& on_message, CallSettings settings) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  Prepare(context, settings);
  auto reader = models_->ExportModel(&context, request);
  return ReadStream(context, *reader, on_message);
}

absl::Status Client::WatchJob(const v1::WatchJobRequest& request,
                              const std::function<bool(const v1::WatchJobResponse&)>& on_message,
                              CallSettings settings) {
  if (!status_.ok()) return status_;
  grpc::ClientContext context;
  Prepare(context, settings);
  auto reader = jobs_->WatchJob(&context, request);
  return ReadStream(context, *reader, on_message);
}

std::string ErrorReason(const absl::Status& status) {
  auto payload = status.GetPayload(kReasonUrl);
  return payload ? std::string(*payload) : std::string();
}

std::string ErrorField(const absl::Status& status) {
  auto payload = status.GetPayload(kFieldUrl);
  return payload ? std::string(*payload) : std::string();
}

}  // namespace posbias
