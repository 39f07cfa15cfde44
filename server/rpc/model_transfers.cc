#include "server/rpc/model_transfers.h"

#include <atomic>
#include <optional>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "server/limits/limits.h"
#include "server/rpc/rpc_scope.h"
#include "server/rpc/unary_call.h"
#include "server/status/error.h"

namespace posbias::rpc {

namespace {

// Who an export's scratch copy counts against: the caller's tenant, or a principal of no tenant
// itself (the prefixes keep a tenant and a principal of the same name apart).
std::string ExportHolder(const api::Caller& caller) {
  return caller.tenant().empty() ? "principal:" + caller.principal.name : "tenant:" + caller.tenant();
}

}  // namespace

// ---- UploadModel ------------------------------------------------------------------------------

// Moves the stream's messages into its UploadSession (model_streams.h, the upload's logic) under
// one lock, ends the call once, and registers the verified file on the executor.
class ModelTransfers::UploadReactor final : public grpc::ServerReadReactor<v1::UploadModelRequest>,
                                            public std::enable_shared_from_this<UploadReactor> {
 public:
  UploadReactor(ModelTransfers* hub, grpc::CallbackServerContext* context, v1::Model* response)
      : hub_(hub), context_(context), response_(response),
        scope_(hub->metrics_, std::string(hub->auth_->MethodFor(v1::UploadModelRequest::descriptor()))),
        session_(hub->catalog_, hub->options_.limits) {}

  void Begin(api::Caller caller) {
    {
      std::lock_guard lock(mutex_);
      caller_ = std::move(caller);
    }
    StartRead(&message_);
  }

  void OnReadDone(bool ok) override {
    std::unique_lock lock(mutex_);
    if (finished_) return;
    last_activity_ = std::chrono::steady_clock::now();
    if (!ok) {  // The client finished sending (or went away: OnCancel ends the call).
      lock.unlock();
      Complete();
      return;
    }
    const absl::Status status = session_.Accept(*caller_, message_);
    lock.unlock();
    if (!status.ok()) {
      End(status);
      return;
    }
    StartRead(&message_);
  }

  void OnCancel() override { End(absl::CancelledError("the client cancelled the upload; nothing was registered")); }

  void OnDone() override {
    auto self = shared_from_this();
    hub_->Forget(this);
  }

  // Ends the upload when its caller may no longer upload (CallAuth::Recheck, after the tokens
  // file was reloaded); one already being registered finishes (its file was accepted).
  void Recheck(const CallAuth& auth) {
    std::optional<api::Caller> caller;
    {
      std::lock_guard lock(mutex_);
      if (finished_ || registering_ || !caller_) return;
      caller = caller_;
    }
    if (auto status = auth.Recheck(*caller); !status.ok()) End(status);
  }

  // Ends an upload that sent nothing for `timeout` (not one being registered).
  void EndIfIdle(std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout) {
    {
      std::lock_guard lock(mutex_);
      if (finished_ || registering_ || now - last_activity_ < timeout) return;
    }
    End(ErrorWithReason(absl::StatusCode::kDeadlineExceeded, ErrorReason::kInvalidArgument,
                        absl::StrCat("the upload sent nothing for ", timeout.count() / 1000, " s (",
                                     limits::Allowed(limits::Limit::kUploadIdleSeconds,
                                                     static_cast<double>(timeout.count()) / 1000.0),
                                     " between messages); nothing was registered")));
  }

  // Finishes the call once; an upload not being registered leaves no staging file.
  void End(const absl::Status& status) {
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      finished_ = true;
      if (!registering_) session_.Abandon();
    }
    if (caller_) CallAuth::Audit(*caller_, status);  // A call refused at the door was never admitted.
    Finish(scope_.Finish(status, context_));
  }

 private:
  // The whole file arrived: check it, then register it on the executor.
  void Complete() {
    absl::Status status;
    {
      std::lock_guard lock(mutex_);
      if (finished_) return;
      status = context_->IsCancelled() ? absl::CancelledError("the client cancelled the upload; nothing was registered")
                                       : session_.Verify();
      if (status.ok()) registering_ = true;
    }
    if (!status.ok()) return End(status);
    auto self = shared_from_this();
    if (!hub_->executor_->TrySubmit(caller_->tenant(), [self] { self->Register(); })) {
      {
        std::lock_guard lock(mutex_);
        registering_ = false;
      }
      End(ServerBusy(*hub_->executor_));
    }
  }

  void Register() {
    auto model = session_.Register(*caller_, [this] { return context_->IsCancelled(); });
    if (model.ok()) *response_ = *std::move(model);
    {
      std::lock_guard lock(mutex_);
      registering_ = false;
    }
    End(model.status());
  }

  ModelTransfers* hub_;
  grpc::CallbackServerContext* context_;
  v1::Model* response_;
  RpcScope scope_;
  std::optional<api::Caller> caller_;  // Unset until admitted: a stream refused at the door holds no principal.
  std::mutex mutex_;  // Guards the flags, the caller and the session.
  bool finished_ = false, registering_ = false;
  std::chrono::steady_clock::time_point last_activity_ = std::chrono::steady_clock::now();
  v1::UploadModelRequest message_;
  api::UploadSession session_;
};

// ---- ExportModel ------------------------------------------------------------------------------

// Writes its ExportSession's messages (model_streams.h, the export's logic) as the client takes
// them; the weights are prepared on the executor.
class ModelTransfers::ExportReactor final : public grpc::ServerWriteReactor<v1::ExportModelResponse>,
                                            public std::enable_shared_from_this<ExportReactor> {
 public:
  ExportReactor(ModelTransfers* hub, grpc::CallbackServerContext* context, const v1::ExportModelRequest& request)
      : hub_(hub), context_(context), request_(request),
        scope_(hub->metrics_, std::string(hub->auth_->MethodFor(v1::ExportModelRequest::descriptor()))),
        session_(hub->catalog_, hub->options_.limits.min_free_disk_bytes) {}

  void Begin(api::Caller caller) {
    {
      std::lock_guard lock(caller_mutex_);
      caller_ = std::move(caller);
    }
    auto self = shared_from_this();
    if (!hub_->executor_->TrySubmit(caller_->tenant(), [self] { self->Prepare(); })) End(ServerBusy(*hub_->executor_));
  }
  void Refuse(const absl::Status& status) { End(status); }

  // Whose scratch copy this stream holds ("" before admission and once it ended): ExportHolder.
  std::string open_holder() {
    std::lock_guard lock(caller_mutex_);
    return ended_ || !caller_ ? "" : ExportHolder(*caller_);
  }

  // Cancels an export whose client has not taken the message in flight for `timeout`: the write
  // then completes with !ok and the stream ends (its scratch copy removed).
  void CancelIfStalled(std::chrono::steady_clock::time_point now, std::chrono::milliseconds timeout) {
    if (ended_ || !writing_) return;
    const auto since = std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(write_started_.load()));
    if (now - since < timeout) return;
    cancelled_ = true;
    context_->TryCancel();
  }

  // Ends the export when its caller may no longer read the weights (CallAuth::Recheck).
  void Recheck(const CallAuth& auth) {
    std::optional<api::Caller> caller;
    {
      std::lock_guard lock(caller_mutex_);
      caller = caller_;
    }
    if (!caller || ended_) return;
    auto status = auth.Recheck(*caller);
    if (status.ok()) return;
    {
      std::lock_guard lock(caller_mutex_);
      revoked_ = status;
    }
    // Preparing stops at its next check; a write in flight completes first (a stream is never
    // finished under a write), then OnWriteDone ends it with this status.
    cancelled_ = true;
    if (!writing_) End(status);
  }

  void OnWriteDone(bool ok) override {
    writing_ = false;
    if (!ok || cancelled_) return End(Ending(absl::CancelledError("the client stopped reading the export")));
    auto chunk = session_.NextChunk();
    if (!chunk) return End(absl::OkStatus());
    message_ = *std::move(chunk);
    Write();
  }

  void OnCancel() override { cancelled_ = true; }  // A write in flight then completes with !ok.
  void OnDone() override {
    auto self = shared_from_this();  // Freed when the reload's snapshot lets go of it too.
    hub_->exports_.Remove(this);
  }

 private:
  // On the executor: the weights to a scratch file, then the header. The build waits for room in
  // the model cache's budget and stops with the client.
  void Prepare() {
    auto header = session_.Prepare(*caller_, request_, [this] { return cancelled_.load() || context_->IsCancelled(); });
    if (!header.ok()) return End(Ending(header.status()));
    message_ = *std::move(header);
    Write();
  }

  // Starts the write of message_ unless the export was cancelled or revoked. writing_ is set
  // before cancelled_ is read, and Recheck sets cancelled_ before it reads writing_: one of the
  // two always sees the other, so the stream is never finished under a write.
  void Write() {
    write_started_ = std::chrono::steady_clock::now().time_since_epoch().count();
    writing_ = true;
    if (cancelled_) {
      writing_ = false;
      return End(Ending(absl::CancelledError("export cancelled")));
    }
    StartWrite(&message_);
  }

  // How the stream ends: as `status`, unless its caller was revoked meanwhile.
  absl::Status Ending(const absl::Status& status) {
    std::lock_guard lock(caller_mutex_);
    return revoked_ ? *revoked_ : status;
  }

  void End(const absl::Status& status) {
    if (ended_.exchange(true)) return;
    session_.Close();
    if (caller_) CallAuth::Audit(*caller_, status);  // Nothing for a refused call (its caller was never admitted).
    Finish(scope_.Finish(status, context_));
  }

  ModelTransfers* hub_;
  grpc::CallbackServerContext* context_;
  v1::ExportModelRequest request_;
  RpcScope scope_;
  std::mutex caller_mutex_;
  std::optional<api::Caller> caller_;  // Unset until admitted: a refused call holds no principal.
  std::optional<absl::Status> revoked_;
  std::atomic<bool> cancelled_{false}, ended_{false}, writing_{false};
  std::atomic<std::chrono::steady_clock::rep> write_started_{0};  // When the write in flight began.
  api::ExportSession session_;
  v1::ExportModelResponse message_;  // Alive while its write is in flight.
};

// ---- The transfers ----------------------------------------------------------------------------

ModelTransfers::ModelTransfers(registry::ModelCatalog* catalog, metrics::Metrics* metrics, Options options)
    : catalog_(catalog), metrics_(metrics), options_(options) {}

ModelTransfers::~ModelTransfers() { Stop(); }

void ModelTransfers::Start(CallExecutor* executor, const CallAuth* auth) {
  executor_ = executor;
  auth_ = auth;
  watchdog_.Start({std::chrono::seconds(1)}, [this] {
    const auto now = std::chrono::steady_clock::now();
    for (const auto& upload : uploads_.Snapshot()) upload->EndIfIdle(now, options_.upload_idle_timeout);
    for (const auto& reactor : exports_.Snapshot()) reactor->CancelIfStalled(now, options_.export_idle_timeout);
  });
}

void ModelTransfers::Stop() {
  watchdog_.Stop();
  for (const auto& upload : uploads_.Snapshot()) {
    upload->End(ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown,
                                "the server is shutting down; upload again after it restarts"));
  }
}

grpc::ServerReadReactor<v1::UploadModelRequest>* ModelTransfers::UploadModel(grpc::CallbackServerContext* context,
                                                                        v1::Model* response) {
  auto upload = std::make_shared<UploadReactor>(this, context, response);
  const bool stopping = watchdog_.stopping();
  uploads_.Add(upload);  // Kept until its OnDone.
  auto caller = auth_->Admit(context, v1::UploadModelRequest::descriptor());
  if (!caller.ok()) {
    upload->End(caller.status());
  } else if (stopping) {
    upload->End(ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown, "the server is shutting down"));
  } else {
    upload->Begin(*std::move(caller));
  }
  return upload.get();
}

grpc::ServerWriteReactor<v1::ExportModelResponse>* ModelTransfers::ExportModel(grpc::CallbackServerContext* context,
                                                                          const v1::ExportModelRequest* request) {
  auto reactor = std::make_shared<ExportReactor>(this, context, *request);
  exports_.Add(reactor);  // Kept until its OnDone.
  auto caller = auth_->AdmitRequest(context, *request);
  if (!caller.ok()) {
    reactor->Refuse(caller.status());
    return reactor.get();
  }
  // Each open export holds a scratch copy of the weights: a tenant's principals together (a
  // principal of no tenant: alone) have a few at a time, so one tenant's copies cannot fill the
  // disk another tenant's upload needs.
  std::lock_guard lock(exports_admission_);
  const std::string holder = ExportHolder(*caller);
  if (const int64_t open = OpenExportsOf(holder); open >= options_.max_exports_per_principal) {
    reactor->Refuse(ErrorWithReason(
        absl::StatusCode::kResourceExhausted, ErrorReason::kQuotaExceeded,
        absl::StrCat(caller->tenant().empty() ? "principal " : "tenant ", caller->tenant().empty() ? caller->principal.name : caller->tenant(),
                     " has ", open, " exports open (",
                     limits::Allowed(limits::Limit::kMaxExportsPerPrincipal,
                                     static_cast<double>(options_.max_exports_per_principal)),
                     ", a tenant's principals together); finish reading one first")));
    return reactor.get();
  }
  reactor->Begin(*std::move(caller));
  return reactor.get();
}

int64_t ModelTransfers::OpenExportsOf(const std::string& holder) {
  int64_t open = 0;
  for (const auto& reactor : exports_.Snapshot()) open += reactor->open_holder() == holder ? 1 : 0;
  return open;
}

void ModelTransfers::Forget(UploadReactor* upload) { uploads_.Remove(upload); }

void ModelTransfers::Recheck() {
  for (const auto& upload : uploads_.Snapshot()) upload->Recheck(*auth_);
  for (const auto& reactor : exports_.Snapshot()) reactor->Recheck(*auth_);
}

}  // namespace posbias::rpc
