#include "server/jobs/worker_pool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>

#include "absl/strings/str_cat.h"
#include "server/status/error.h"

namespace posbias::jobs {
namespace {

// The store's word that this attempt no longer owns the job: a newer attempt does (ABORTED), the
// job is gone (NOT_FOUND) or it left the states an attempt may write (FAILED_PRECONDITION).
bool FencedOut(const absl::Status& status) {
  return status.code() == absl::StatusCode::kAborted || status.code() == absl::StatusCode::kNotFound ||
         status.code() == absl::StatusCode::kFailedPrecondition;
}

}  // namespace

WorkerPool::WorkerPool(JobStore* store, JobRunner* runner, Options options, WorkerObserver observer)
    : store_(store), runner_(runner), options_(std::move(options)), observer_(std::move(observer)) {}

WorkerPool::~WorkerPool() { Stop(); }

void WorkerPool::Start() {
  // Another process's submission (or a re-queue by the reaper) wakes idle workers at once.
  store_->OnWorkAvailable([this] { Wake(); });
  for (const auto& spec : options_.workers) threads_.emplace_back([this, spec] { Loop(spec); });
  backlog_retry_.Start({std::chrono::milliseconds(options_.backlog_retry_ms)}, [this] { (void)TryBacklogOnce(); });
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
  backlog_retry_.Stop();
  // A last try; what is still refused is recovered at the next start (RUNNING jobs are re-queued
  // and resume from their checkpoints).
  (void)TryBacklogOnce();
}

void WorkerPool::KeepForRetry(const std::string& job_id, std::function<absl::Status()> write) {
  std::lock_guard lock(backlog_mutex_);
  backlog_.push_back({job_id, std::move(write)});
}

int64_t WorkerPool::backlog_size() {
  std::lock_guard lock(backlog_mutex_);
  return static_cast<int64_t>(backlog_.size());
}

bool WorkerPool::TryBacklogOnce() {
  std::vector<PendingWrite> pending;
  {
    std::lock_guard lock(backlog_mutex_);
    pending.swap(backlog_);
  }
  std::vector<PendingWrite> still;
  for (auto& write : pending) {
    const absl::Status status = write.write();
    // Taken, or the job moved on without this attempt (re-queued, cancelled, deleted): done.
    if (!status.ok() && !FencedOut(status)) still.push_back(std::move(write));
  }
  std::lock_guard lock(backlog_mutex_);
  backlog_.insert(backlog_.end(), std::make_move_iterator(still.begin()), std::make_move_iterator(still.end()));
  return backlog_.empty();
}

// Renews the lease of one running job every lease/3 until destroyed; `lost` becomes true when the
// store says a newer attempt owns the job (or it is gone).
class WorkerPool::Heartbeat {
 public:
  Heartbeat(JobStore* store, const JobRecord& job, std::atomic<bool>* lost) {
    const int64_t lease_ms = store->lease_ms();
    if (lease_ms <= 0) return;
    renew_.Start({std::chrono::milliseconds(std::max<int64_t>(1, lease_ms / 3))},
                 [store, id = job.id, attempt = job.attempt, lost] {
                   const absl::Status renewed = store->RenewLease(id, attempt);
                   // UNAVAILABLE: keep trying; if the lease runs out meanwhile the reaper re-queues
                   // the job and this attempt's writes are refused.
                   if (renewed.code() == absl::StatusCode::kAborted || renewed.code() == absl::StatusCode::kNotFound) {
                     *lost = true;
                   }
                 });
  }

 private:
  threads::PeriodicTask renew_;  // Stopped and joined when the heartbeat is destroyed.
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

// A job's final write: retried through a short outage, then kept in the backlog unless the store
// took it or fenced this attempt out.
void WorkerPool::Finalize(const std::string& job_id, std::function<absl::Status()> write) {
  const absl::Status status = WithRetries(write);
  if (status.ok() || FencedOut(status)) return;
  KeepForRetry(job_id, std::move(write));
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
  auto report = [&](const ProgressUpdate& progress) {
    if (lease_lost) return !(fenced = true);
    // The time limit counts every attempt's run time: a job re-queued by crashes or drains does
    // not start its clock again.
    const auto elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
    ProgressUpdate update = progress;
    update.run_ms = job.run_ms + elapsed.count();
    auto updated = store_->UpdateProgress(job.id, job.attempt, update);
    // The store out of reach for a moment: keep measuring (the heartbeat keeps trying; if the
    // lease runs out meanwhile, the reaper re-queues the job and this attempt is fenced out).
    if (updated.status().code() == absl::StatusCode::kUnavailable) return !stopping_.load();
    if (FencedOut(updated.status())) return !(fenced = true);
    // Any other refusal (a full disk, a broken transaction) loses only this checkpoint: keep
    // measuring; the final write is kept and retried (Finalize) if the store still refuses then.
    if (!updated.ok()) return !stopping_.load();
    if (updated->state == JobState::kCancelling) return !(cancelled = true);
    if (job.time_limit_seconds > 0 && static_cast<double>(update.run_ms) / 1000.0 > job.time_limit_seconds) {
      return !(timed_out = true);
    }
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
    outcome = "succeeded";
    Finalize(job.id, [store = store_, id = job.id, attempt = job.attempt, text = *result] {
      return store->Succeed(id, attempt, text).status();
    });
  } else if (cancelled) {
    outcome = "cancelled";
    Finalize(job.id, [store = store_, id = job.id, fence] { return store->Transition(id, JobState::kCancelled, fence).status(); });
  } else if (timed_out) {
    outcome = "failed";
    fence.error_reason = std::string(ErrorReasonName(ErrorReason::kJobTimeLimitExceeded));
    fence.error_code = static_cast<int32_t>(absl::StatusCode::kDeadlineExceeded);
    fence.error_message = absl::StrCat("the job ran past its time limit of ", job.time_limit_seconds, " s");
    Finalize(job.id, [store = store_, id = job.id, fence] { return store->Transition(id, JobState::kFailed, fence).status(); });
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
    Finalize(job.id, [store = store_, id = job.id, fence] { return store->Transition(id, JobState::kFailed, fence).status(); });
  }
  heartbeat.reset();
  if (observer_.finished) {
    observer_.finished(job, outcome, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
}

}  // namespace posbias::jobs
