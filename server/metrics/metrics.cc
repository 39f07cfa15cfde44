#include "server/metrics/metrics.h"

#include <unistd.h>

#include <chrono>
#include <fstream>

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "prometheus/text_serializer.h"

namespace posbias::metrics {
namespace {

// Latency buckets in seconds: 50 us to 30 s, roughly x2.5 apart.
const prometheus::Histogram::BucketBoundaries kLatencyBuckets = {
    5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};

double SecondsSinceEpoch() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

Metrics::Metrics(const BuildInfo& build) : registry_(std::make_shared<prometheus::Registry>()) {
  requests_ = &prometheus::BuildCounter()
                   .Name("posbias_rpc_requests_total")
                   .Help("Finished RPCs by full method name and gRPC status code.")
                   .Register(*registry_);
  latency_ = &prometheus::BuildHistogram()
                  .Name("posbias_rpc_latency_seconds")
                  .Help("RPC handling time in seconds, by full method name.")
                  .Register(*registry_);
  points_ = &prometheus::BuildCounter()
                 .Name("posbias_points_evaluated_total")
                 .Help("Continuum points and discrete positions computed, by kind.")
                 .Register(*registry_);
  in_flight_ = &prometheus::BuildGauge()
                    .Name("posbias_rpcs_in_flight")
                    .Help("RPCs being handled right now.")
                    .Register(*registry_)
                    .Add({});
  prometheus::BuildGauge()
      .Name("posbias_build_info")
      .Help("Always 1; the labels carry the versions of posbias and its RPC stack.")
      .Register(*registry_)
      .Add({{"version", build.version},
            {"grpc_version", build.grpc_version},
            {"protobuf_version", build.protobuf_version}})
      .Set(1);
  auto& memory = prometheus::BuildGauge()
                     .Name("process_memory_bytes")
                     .Help("Process memory in bytes: resident set and virtual size.")
                     .Register(*registry_);
  resident_bytes_ = &memory.Add({{"type", "resident"}});
  virtual_bytes_ = &memory.Add({{"type", "virtual"}});
  start_time_ = &prometheus::BuildGauge()
                     .Name("process_start_time_seconds")
                     .Help("Start time of the process since the Unix epoch, in seconds.")
                     .Register(*registry_)
                     .Add({});
  start_time_->Set(SecondsSinceEpoch());
  auth_refusals_ = &prometheus::BuildCounter()
                        .Name("posbias_auth_refusals_total")
                        .Help("Calls refused before their work ran: kind unauthenticated or role.")
                        .Register(*registry_);
  tokens_reload_failures_ = &prometheus::BuildCounter()
                                 .Name("posbias_tokens_reload_failures_total")
                                 .Help("Changed tokens files that failed to parse (the last good set stays).")
                                 .Register(*registry_)
                                 .Add({});
  RegisterJobMetrics();
}

// The job lifecycle's metrics: submissions, outcomes, queue wait, run time, throughput, model
// loads, the store's jobs by state and device memory.
void Metrics::RegisterJobMetrics() {
  jobs_submitted_ = &prometheus::BuildCounter()
                         .Name("posbias_jobs_submitted_total")
                         .Help("Jobs accepted by SubmitJob (idempotent retries not counted).")
                         .Register(*registry_)
                         .Add({});
  jobs_finished_ = &prometheus::BuildCounter()
                        .Name("posbias_jobs_finished_total")
                        .Help("Job attempts that ended, by outcome: succeeded, failed, cancelled, requeued, superseded.")
                        .Register(*registry_);
  const prometheus::Histogram::BucketBoundaries job_buckets = {0.1, 0.5, 1, 5, 10, 30, 60, 300, 900, 3600, 14400};
  queue_wait_ = &prometheus::BuildHistogram()
                     .Name("posbias_job_queue_wait_seconds")
                     .Help("Time from submission to a worker claiming the job, in seconds.")
                     .Register(*registry_)
                     .Add({}, job_buckets);
  run_time_ = &prometheus::BuildHistogram()
                   .Name("posbias_job_run_seconds")
                   .Help("Run time of one job attempt, in seconds.")
                   .Register(*registry_)
                   .Add({}, job_buckets);
  vjps_per_second_ = &prometheus::BuildGauge()
                          .Name("posbias_jacobian_vjps_per_second")
                          .Help("Vector-Jacobian products per second of the last finished job attempt.")
                          .Register(*registry_)
                          .Add({});
  model_load_ = &prometheus::BuildHistogram()
                     .Name("posbias_model_load_seconds")
                     .Help("Time to build or load a model, in seconds.")
                     .Register(*registry_)
                     .Add({}, prometheus::Histogram::BucketBoundaries{0.01, 0.1, 0.5, 1, 5, 10, 30, 120});
  queue_depth_ = &prometheus::BuildGauge()
                      .Name("posbias_jobs")
                      .Help("Jobs in the store by state (queued, running, cancelling, succeeded, failed, cancelled); a job split into sample parts counts as its parts.")
                      .Register(*registry_);
  device_memory_ = &prometheus::BuildGauge()
                        .Name("posbias_device_memory_bytes")
                        .Help("Memory in use on a compute device, in bytes (CPU: the process's resident set).")
                        .Register(*registry_);
}

void Metrics::JobSubmitted() { jobs_submitted_->Increment(); }
void Metrics::AuthRefused(const std::string& kind) { auth_refusals_->Add({{"kind", kind}}).Increment(); }
void Metrics::TokensReloadFailed() { tokens_reload_failures_->Increment(); }
void Metrics::JobStarted(double wait_seconds) { queue_wait_->Observe(wait_seconds); }
void Metrics::JobFinished(const std::string& outcome, double run_seconds, double vjps) {
  jobs_finished_->Add({{"outcome", outcome}}).Increment();
  run_time_->Observe(run_seconds);
  if (run_seconds > 0 && vjps > 0) vjps_per_second_->Set(vjps / run_seconds);
}
void Metrics::ModelLoaded(double seconds) { model_load_->Observe(seconds); }
void Metrics::SetQueueDepthSource(std::function<std::map<std::string, int64_t>()> source) {
  std::lock_guard lock(sources_mutex_);
  queue_depth_source_ = std::move(source);
}
void Metrics::SetDeviceMemorySource(std::function<std::map<std::string, double>()> source) {
  std::lock_guard lock(sources_mutex_);
  device_memory_source_ = std::move(source);
}

void Metrics::RecordRpc(const std::string& method, const std::string& code,
                        double latency_seconds) {
  requests_->Add({{"method", method}, {"code", code}}).Increment();
  latency_->Add({{"method", method}}, kLatencyBuckets).Observe(latency_seconds);
}

void Metrics::AddPointsEvaluated(const std::string& kind, double count) {
  points_->Add({{"kind", kind}}).Increment(count);
}

void Metrics::RefreshProcessMetrics() {
  // /proc/self/statm: total program size and resident set, in pages.
  std::ifstream statm("/proc/self/statm");
  double size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    const double page = static_cast<double>(sysconf(_SC_PAGESIZE));
    virtual_bytes_->Set(size_pages * page);
    resident_bytes_->Set(resident_pages * page);
  }
}

std::string Metrics::Scrape() {
  RefreshProcessMetrics();
  {
    std::lock_guard lock(sources_mutex_);
    if (queue_depth_source_) {
      for (const auto& [state, count] : queue_depth_source_()) {
        queue_depth_->Add({{"state", state}}).Set(static_cast<double>(count));
      }
    }
    if (device_memory_source_) {
      for (const auto& [device, bytes] : device_memory_source_()) device_memory_->Add({{"device", device}}).Set(bytes);
    } else {
      device_memory_->Add({{"device", "cpu"}}).Set(resident_bytes_->Value());
    }
  }
  return prometheus::TextSerializer().Serialize(registry_->Collect());
}

MetricsHttpServer::MetricsHttpServer(Metrics* metrics, std::string host, int port)
    : metrics_(metrics), host_(std::move(host)), port_(port) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

absl::Status MetricsHttpServer::Start() {
  server_ = std::make_unique<httplib::Server>();
  server_->Get("/metrics", [this](const httplib::Request&, httplib::Response& response) {
    response.set_content(metrics_->Scrape(), "text/plain; version=0.0.4; charset=utf-8");
  });
  server_->Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain");
  });
  bound_port_ = port_ == 0 ? server_->bind_to_any_port(host_) : port_;
  if (bound_port_ < 0 || (port_ != 0 && !server_->bind_to_port(host_, port_))) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen for metrics on ", host_, ":", port_));
  }
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  // stop() only ends a server that is already listening: wait for that, so that a Stop() right
  // after Start() (the gRPC server failed to start) cannot leave the listener running forever.
  for (int waited_ms = 0; !server_->is_running() && waited_ms < 10'000; ++waited_ms) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace posbias::metrics
