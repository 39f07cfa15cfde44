#include "server/jobs/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::jobs {

WorkerPool::WorkerPool(JobStore* store, JobRunner* runner, Options options, WorkerObserver observer)
    : store_(store), runner_(runner), options_(std::move(options)), observer_(std::move(observer)) {}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Start() {
  // Another process's submission (or a re-queue by the reaper) wakes idle workers at once.
  store_->OnWorkAvailable([this] { Wake(); });
  for (const auto& spec : options_.workers) threads_.emplace_back([this, spec] { Loop(spec); });
}

void WorkerPool::Wake() { wake_.notify_all(); }

void WorkerPool::Stop() {
  stopping_ = true;
  wake_.notify_all();
  for (auto& thread : threads_) {
    if (thread.joinable()) thread.join();
  }
  if (!threads_.empty()) store_->OnWorkAvailable(nullptr);
  threads_.clear();
}

// Renews the lease of one running job every lease/3 until destroyed; `lost` becomes true when the
// store says a newer attempt owns the job (or it is gone).
class WorkerPool::Heartbeat {
 public:
  Heartbeat(JobStore* store, const JobRecord& job, std::atomic<bool>* lost) {
    const int64_t lease_ms = store->lease_ms();
    if (lease_ms <= 0) return;
    thread_ = std::thread([this, store, id = job.id, attempt = job.attempt, lost, lease_ms] {
      std::unique_lock lock(mutex_);
      while (!wake_.wait_for(lock, std::chrono::milliseconds(std::max<int64_t>(1, lease_ms / 3)), [this] { return done_; })) {
        lock.unlock();
        const absl::Status renewed = store->RenewLease(id, attempt);
        // UNAVAILABLE: keep trying; if the lease runs out meanwhile the reaper re-queues the job
        // and this attempt's writes are refused.
        if (renewed.code() == absl::StatusCode::kAborted || renewed.code() == absl::StatusCode::kNotFound) *lost = true;
        lock.lock();
      }
    });
  }
  ~Heartbeat() {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

void WorkerPool::Loop(const WorkerSpec& spec) {
  while (!stopping_) {
    auto claimed = store_->ClaimNext(spec.name, {spec.device_kind}, spec.device_name);
    if (claimed.ok() && claimed->has_value()) {
      RunOne(spec, **claimed);
      continue;
    }
    std::unique_lock lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(options_.idle_poll_ms), [this] { return stopping_.load(); });
  }
}

// A job's final write is retried while the store is out of reach (UNAVAILABLE), for up to
// options_.final_write_retry_ms: a finished measurement is not thrown away for a short outage.
absl::Status WorkerPool::WithRetries(const std::function<absl::Status()>& write) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.final_write_retry_ms);
  auto pause = std::chrono::milliseconds(50);
  while (true) {
    absl::Status status = write();
    if (status.code() != absl::StatusCode::kUnavailable || std::chrono::steady_clock::now() + pause > deadline) {
      return status;
    }
    std::this_thread::sleep_for(pause);
    pause = std::min<std::chrono::milliseconds>(pause * 2, std::chrono::milliseconds(2000));
  }
}

// The runner, with every exception it lets out turned into a failure of this job: a measurement
// that throws (a LibTorch error, malformed JSON, an allocation failure) fails its job, not the
// process, and the worker goes on with the next job.
absl::StatusOr<std::string> WorkerPool::RunGuarded(const JobRecord& job,
                                                   const std::function<bool(const ProgressUpdate&)>& report) {
  try {
    return runner_->Run(job, report);
  } catch (const std::bad_alloc&) {
    return ErrorWithReason(absl::StatusCode::kResourceExhausted, ErrorReason::kInsufficientMemory,
                           "the measurement ran out of memory");
  } catch (const std::exception& error) {
    return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                           absl::StrCat("the measurement failed: ", error.what()));
  } catch (...) {
    return ErrorWithReason(absl::StatusCode::kInternal, ErrorReason::kInternalError,
                           "the measurement failed with an unknown exception");
  }
}

void WorkerPool::RunOne(const WorkerSpec&, const JobRecord& job) {
  const auto start = std::chrono::steady_clock::now();
  if (observer_.started) {
    const double now_s = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    observer_.started(std::max(0.0, now_s - job.created_ms / 1000.0));
  }
  bool cancelled = false, timed_out = false, fenced = false;
  std::atomic<bool> lease_lost{false};
  auto heartbeat = std::make_unique<Heartbeat>(store_, job, &lease_lost);
  auto report = [&](const ProgressUpdate& update) {
    if (lease_lost) return !(fenced = true);
    auto updated = store_->UpdateProgress(job.id, job.attempt, update);
    // The store out of reach for a moment: keep measuring (the heartbeat keeps trying; if the
    // lease runs out meanwhile, the reaper re-queues the job and this attempt is fenced out).
    if (updated.status().code() == absl::StatusCode::kUnavailable) return !stopping_.load();
    if (!updated.ok()) return !(fenced = true);
    if (updated->state == JobState::kCancelling) return !(cancelled = true);
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (job.time_limit_seconds > 0 && elapsed > job.time_limit_seconds) return !(timed_out = true);
    return !stopping_.load();
  };
  auto result = RunGuarded(job, report);
  if (lease_lost) fenced = true;  // The heartbeat goes on until the final write is done.
  JobStore::TransitionOptions fence;
  fence.attempt = job.attempt;
  std::string outcome;
  if (fenced) {
    outcome = "superseded";  // A newer attempt owns the job; write nothing.
  } else if (result.ok()) {
    const auto stored = WithRetries([&] { return store_->Succeed(job.id, job.attempt, *result).status(); });
    outcome = stored.ok() ? "succeeded" : "superseded";  // Unrecorded: the job runs again after its lease.
  } else if (cancelled) {
    outcome = "cancelled";
    (void)WithRetries([&] { return store_->Transition(job.id, JobState::kCancelled, fence).status(); });
  } else if (timed_out) {
    outcome = "failed";
    fence.error_reason = std::string(ErrorReasonName(ErrorReason::kJobTimeLimitExceeded));
    fence.error_code = static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded);
    fence.error_message = absl::StrCat("the job ran past its time limit of ", job.time_limit_seconds, " s");
    (void)WithRetries([&] { return store_->Transition(job.id, JobState::kFailed, fence).status(); });
  } else if (stopping_) {
    outcome = "requeued";  // Drained at shutdown: resumes from its checkpoint.
    // No retries while shutting down: an unrecorded re-queue is done by the reaper after the lease.
    (void)store_->Transition(job.id, JobState::kQueued, fence);
  } else {
    outcome = "failed";
    fence.error_reason = ErrorReasonOf(result.status());
    if (fence.error_reason.empty()) fence.error_reason = std::string(ErrorReasonName(ErrorReason::kInternalError));
    fence.error_code = static_cast<int32_t>(result.status().code());
    fence.error_message = std::string(result.status().message());
    (void)WithRetries([&] { return store_->Transition(job.id, JobState::kFailed, fence).status(); });
  }
  heartbeat.reset();
  if (observer_.finished) {
    observer_.finished(job, outcome, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

}  // namespace posbias::jobs
