// The open WatchJob streams, held without a thread each. One poller thread looks at the store
// every poll interval (once per watched job, however many streams watch it) and writes a job to
// every stream whose job changed since its last message; a stream ends after writing its job's
// terminal state, when the client goes away, or at shutdown (UNAVAILABLE / SHUTTING_DOWN). At most
// max_streams are open at once: one more is refused with RESOURCE_EXHAUSTED / SERVER_BUSY.
//
// A stream's lifecycle (its reactor): opened (counted) -> first message (the job as it is) ->
// a message per change -> finished once (terminal job, error, cancel or shutdown) -> done
// (removed, freed). gRPC calls are made without holding a lock, since gRPC may run a reaction on
// the calling thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <grpcpp/grpcpp.h>

#include "posbias/v1/job_service.pb.h"
#include "server/auth/authenticator.h"
#include "server/auth/visibility.h"
#include "server/jobs/job_store.h"
#include "server/limits/limits.h"
#include "server/threads/periodic_task.h"
#include "server/metrics/metrics.h"
#include "server/rpc/call_auth.h"
#include "server/api/api.h"
#include "server/rpc/open_streams.h"

namespace posbias::rpc {

class JobWatches {
 public:
  struct Options {
    int64_t max_streams = limits::Default<int64_t>(limits::Limit::kMaxWatchStreams);  // Open per server.
    // Fraction of max_streams one tenant's watchers may hold open (at least one stream).
    double tenant_share = limits::Default<double>(limits::Limit::kTenantShare);
    int64_t poll_ms = 100;       // How often watched jobs are looked up.
  };
  JobWatches(jobs::JobStore* store, metrics::Metrics* metrics, Options options);
  ~JobWatches();

  // The WatchJob RPC (the generated JobServiceWiring forwards to it): admitted here on gRPC's
  // thread (a watch holds no executor thread); the stream opens only after the tenant check
  // succeeds, and any failure of the lookup refuses it.
  grpc::ServerWriteReactor<v1::WatchJobResponse>* WatchJob(grpc::CallbackServerContext* context,
                                                           const v1::WatchJobRequest* request);
  // The reactor of a new stream of the job's states, starting from `job` as the caller's check
  // read it; one that ends at once when `job` is an error (the caller may not watch, or the job
  // is not the caller's). `method` labels the call's metrics.
  // `watcher`: who watches; the poller checks at every look that it sees the job
  // (auth/visibility.h), and a job it does not see ends the stream with the NOT_FOUND a missing
  // job gets.
  grpc::ServerWriteReactor<v1::WatchJobResponse>* Open(grpc::CallbackServerContext* context, const std::string& id,
                                                       std::string method, const absl::StatusOr<jobs::JobRecord>& job,
                                                       std::optional<api::Caller> watcher);
  // `auth` admits the calls, `requests` answers whether the caller sees the job; both outlive
  // this. Starts the poller.
  void Start(const CallAuth* auth, api::JobRequests* requests);
  // Ends every open stream with UNAVAILABLE / SHUTTING_DOWN and refuses new ones; joins the poller.
  void Stop();
  // After the tokens file was reloaded: ends every open watch whose principal was revoked
  // (UNAUTHENTICATED) or lost its role or tenant (PERMISSION_DENIED).
  void Recheck();

 private:
  class Watch;
  void Remove(Watch* watch);
  void PollOnce();

  jobs::JobStore* store_;
  metrics::Metrics* metrics_;
  Options options_;
  const CallAuth* auth_ = nullptr;
  api::JobRequests* requests_ = nullptr;
  OpenStreams<Watch> open_;
  threads::PeriodicTask poller_;  // PollOnce every poll_ms, and at once when a watch opens.
};

}  // namespace posbias::rpc
