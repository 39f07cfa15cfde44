#include "server/rpc/job_watches.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/limits/limits.h"
#include "server/rpc/call_auth.h"
#include "server/api/api.h"
#include "server/rpc/rpc_scope.h"
#include "server/status/error.h"

namespace posbias::rpc {
namespace {

absl::Status ShuttingDown() {
  return ErrorWithReason(absl::StatusCode::kUnavailable, ErrorReason::kShuttingDown,
                         "the server is shutting down; watch again after it restarts");
}

}  // namespace

class JobWatches::Watch final : public grpc::ServerWriteReactor<v1::WatchJobResponse>,
                                public std::enable_shared_from_this<Watch> {
 public:
  Watch(JobWatches* hub, grpc::CallbackServerContext* context, std::string id, metrics::Metrics* metrics,
        std::string method, std::optional<api::Caller> watcher)
      : hub_(hub), context_(context),
        state_(watcher ? std::optional<auth::Principal>(watcher->principal) : std::nullopt, std::move(id)),
        watcher_(std::move(watcher)), scope_(metrics, std::move(method)) {}

  const std::string& id() const { return state_.id(); }
  // Who watches; unset for a watch refused at the door.
  const std::optional<api::Caller>& watcher() const { return watcher_; }
  bool finished() {
    std::lock_guard lock(mutex_);
    return finished_;
  }
  // The stream passed every check in Open: its first look at `job` (the record the caller's
  // check read, so no second read of the store) happens here, on the thread that runs the RPC
  // method, and from then on the poller writes to it. Until then (and for a refused stream,
  // always) only Open finishes it: found by the wire fuzzer, a refused watch the poller looked at
  // first ended from the poller's thread before the method had returned, and lost its trailers
  // (no posbias-error-reason). The first message's write holds the poller off until the method
  // has returned (a write completes only on a bound reactor).
  void AdmitWith(const absl::StatusOr<jobs::JobRecord>& job) {
    std::unique_lock lock(mutex_);
    admitted_ = true;
    OfferLocked(lock, job);
  }

  // The job as the poller read it: what JobWatchState (job_requests.h, the watch's logic) decides
  // is written, and the stream ends when it says so (after the write in flight).
  void Offer(const absl::StatusOr<jobs::JobRecord>& job) {
    std::unique_lock lock(mutex_);
    if (!admitted_) return;
    OfferLocked(lock, job);
  }

  // Offer's work, under `lock` (released before the write or the end starts).
  void OfferLocked(std::unique_lock<std::mutex>& lock, const absl::StatusOr<jobs::JobRecord>& job) {
    if (finished_ || writing_) return;
    api::JobWatchState::Step step = state_.Look(job);
    if (!step.message) {
      if (!step.end) return;
      finished_ = true;
      lock.unlock();
      Finish(scope_.Finish(*step.end, context_));
      return;
    }
    message_ = *std::move(step.message);
    if (step.end) pending_ = *step.end;
    writing_ = true;
    lock.unlock();
    StartWrite(&message_);
  }

  // Ends the stream with `status` (now, or after the write in flight).
  void End(const absl::Status& status) {
    std::unique_lock lock(mutex_);
    if (finished_) return;
    if (writing_) {
      pending_ = status;
      return;
    }
    finished_ = true;
    lock.unlock();
    Finish(scope_.Finish(status, context_));
  }

  void OnWriteDone(bool ok) override {
    std::unique_lock lock(mutex_);
    writing_ = false;
    if (finished_) return;
    std::optional<absl::Status> end;
    if (!ok) {
      end = absl::CancelledError("the client stopped reading the watch");
    } else if (pending_) {
      end = *pending_;
    }
    if (!end) return;
    finished_ = true;
    lock.unlock();
    Finish(scope_.Finish(*end, context_));
  }

  void OnCancel() override { End(absl::CancelledError("watch cancelled")); }

  void OnDone() override {
    auto self = shared_from_this();  // Freed when the poller lets go of it too.
    hub_->Remove(this);
  }

 private:
  JobWatches* hub_;
  grpc::CallbackServerContext* context_;
  api::JobWatchState state_;  // Guarded by mutex_.
  const std::optional<api::Caller> watcher_;
  RpcScope scope_;
  std::mutex mutex_;
  bool writing_ = false, finished_ = false, admitted_ = false;
  std::optional<absl::Status> pending_;  // How the stream ends once the write in flight is done.
  v1::WatchJobResponse message_;  // Alive while its write is in flight.
};

JobWatches::JobWatches(jobs::JobStore* store, metrics::Metrics* metrics, Options options)
    : store_(store), metrics_(metrics), options_(options) {}

JobWatches::~JobWatches() { Stop(); }

grpc::ServerWriteReactor<v1::WatchJobResponse>* JobWatches::Open(grpc::CallbackServerContext* context,
                                                                 const std::string& id, std::string method,
                                                                 const absl::StatusOr<jobs::JobRecord>& job,
                                                                 std::optional<api::Caller> watcher) {
  auto watch = std::make_shared<Watch>(this, context, id, metrics_, std::move(method), std::move(watcher));
  const bool stopping = poller_.stopping();
  // Every stream, a refused one too, is kept until its OnDone.
  const auto before = static_cast<int64_t>(open_.Add(watch));
  std::optional<absl::Status> refused;
  std::shared_ptr<Watch> displaced;  // A stream of a tenant beyond its share, closed to make room.
  if (!job.ok()) {
    refused = job.status();
  } else if (stopping) {
    refused = ShuttingDown();
  } else if (before >= options_.max_streams) {
    // Full. Shares bind only now (work-conserving: a tenant alone may hold every stream): a
    // tenant below its share takes the place of a stream of the tenant furthest beyond
    // its share, which ends with SERVER_BUSY and may watch again or poll.
    const int64_t share = limits::TenantShare(options_.max_streams, options_.tenant_share);
    std::map<std::string, std::vector<std::shared_ptr<Watch>>> held;
    for (const auto& open : open_.Snapshot()) {
      if (open != watch && open->watcher() && !open->finished()) held[open->watcher()->tenant()].push_back(open);
    }
    const std::string tenant = watch->watcher() ? watch->watcher()->tenant() : "";
    const std::vector<std::shared_ptr<Watch>>* most = nullptr;
    for (const auto& [other, streams] : held) {
      if (other != tenant && static_cast<int64_t>(streams.size()) > share && (!most || streams.size() > most->size())) {
        most = &streams;
      }
    }
    if (watch->watcher() && static_cast<int64_t>(held[tenant].size()) < share && most != nullptr) {
      displaced = most->back();
    } else {
      refused = ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kServerBusy,
                                absl::StrCat("this server has its maximum of open WatchJob streams (",
                                             limits::Allowed(limits::Limit::kMaxWatchStreams,
                                                             static_cast<double>(options_.max_streams)),
                                             ") and no tenant holds more than its share (", share,
                                             ": --tenant-share of --max-watch-streams) while yours holds ",
                                             held[tenant].size(), "; poll GetJob or retry later"));
    }
  }
  if (displaced) {
    const std::string& owner = displaced->watcher()->tenant();
    displaced->End(ErrorWithReason(
        absl::StatusCode::kResourceExhausted, ErrorReason::kServerBusy,
        absl::StrCat("this WatchJob stream was closed to make room for another tenant's: the server holds its maximum "
                     "of streams and tenant ", owner.empty() ? "(default)" : owner,
                     " held more than its share (--tenant-share of --max-watch-streams); watch again later or poll "
                     "GetJob")));
  }
  if (refused) {
    watch->End(*refused);
  } else {
    watch->AdmitWith(job);  // The first message goes out at once.
  }
  return watch.get();
}

void JobWatches::Remove(Watch* watch) { open_.Remove(watch); }

void JobWatches::PollOnce() {
  const auto watches = open_.Snapshot();
  std::map<std::string, absl::StatusOr<jobs::JobRecord>> jobs;  // One lookup per watched job.
  for (const auto& watch : watches) {
    auto it = jobs.find(watch->id());
    if (it == jobs.end()) it = jobs.emplace(watch->id(), store_->Get(watch->id())).first;
    watch->Offer(it->second);
  }
}

void JobWatches::Start(const CallAuth* auth, api::JobRequests* requests) {
  auth_ = auth;
  requests_ = requests;
  poller_.Start({std::chrono::milliseconds(options_.poll_ms), /*run_first=*/true}, [this] { PollOnce(); });
}

grpc::ServerWriteReactor<v1::WatchJobResponse>* JobWatches::WatchJob(grpc::CallbackServerContext* context,
                                                                     const v1::WatchJobRequest* request) {
  auto caller = auth_->AdmitRequest(context, *request);
  const absl::StatusOr<jobs::JobRecord> job =
      caller.ok() ? api::VisibleJob(*requests_, *caller, request->id()) : absl::StatusOr<jobs::JobRecord>(caller.status());
  // A refused watch holds no principal: it sees nothing, even for the moment before it ends.
  const bool admitted = job.ok();
  return Open(context, request->id(), std::string(auth_->MethodFor(request->GetDescriptor())), job,
              admitted ? std::optional<api::Caller>(*std::move(caller)) : std::nullopt);
}

void JobWatches::Recheck() {
  if (auth_ == nullptr) return;
  for (const auto& watch : open_.Snapshot()) {
    if (!watch->watcher()) continue;
    if (auto status = auth_->Recheck(*watch->watcher()); !status.ok()) watch->End(status);
  }
}

void JobWatches::Stop() {
  poller_.Stop();
  for (const auto& watch : open_.Snapshot()) watch->End(ShuttingDown());
}

}  // namespace posbias::rpc
