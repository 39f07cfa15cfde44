// The one owner of the process's Prometheus registry, and its HTTP endpoint.
//
// prometheus-cpp provides the metric types and the text serializer; the endpoint is cpp-httplib,
// whose threads use the normal stack size (prometheus-cpp's own exposer starts small-stack threads
// that cannot start in a torch-linked process; see DEPENDENCIES.md). Every metric posbias exports is
// declared here, so the metrics reference (deploy/README.md, docs/operations/metrics.md) has one source.
#pragma once

#include <atomic>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace httplib {
class Server;
}

namespace posbias::metrics {

struct BuildInfo {
  std::string version;
  std::string grpc_version;
  std::string protobuf_version;
};

class Metrics {
 public:
  explicit Metrics(const BuildInfo& build);

  // One finished RPC: counts it by method and gRPC status code name and observes its latency.
  void RecordRpc(const std::string& method, const std::string& code, double latency_seconds);
  prometheus::Gauge& rpcs_in_flight() { return *in_flight_; }
  // Points (continuum) or positions (discrete) computed, by kind.
  void AddPointsEvaluated(const std::string& kind, double count);

  // Jobs: submitted; started after waiting `wait_seconds` in the queue; finished with an outcome
  // (succeeded, failed, cancelled, requeued, superseded) after `run_seconds` and `vjps` products.
  void JobSubmitted();
  void JobStarted(double wait_seconds);
  void JobFinished(const std::string& outcome, double run_seconds, double vjps);
  void ModelLoaded(double seconds);
  // A call refused at the door: `kind` is "unauthenticated" (no, unknown or ambiguous
  // credentials) or "role" (the principal's role is too low).
  void AuthRefused(const std::string& kind);
  // A changed tokens file that could not be parsed (the last good principals stay).
  void TokensReloadFailed();
  // Read at every scrape: jobs per state, and device memory in use (bytes) per device.
  void SetQueueDepthSource(std::function<std::map<std::string, int64_t>()> source);
  void SetDeviceMemorySource(std::function<std::map<std::string, double>()> source);

  // The Prometheus text exposition of every metric, with process memory refreshed first.
  std::string Scrape();

 private:
  void RegisterJobMetrics();
  void RefreshProcessMetrics();

  std::shared_ptr<prometheus::Registry> registry_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Family<prometheus::Histogram>* latency_;
  prometheus::Family<prometheus::Counter>* points_;
  prometheus::Gauge* in_flight_;
  prometheus::Gauge* resident_bytes_;
  prometheus::Gauge* virtual_bytes_;
  prometheus::Gauge* start_time_;
  prometheus::Counter* jobs_submitted_;
  prometheus::Family<prometheus::Counter>* jobs_finished_;
  prometheus::Histogram* queue_wait_;
  prometheus::Histogram* run_time_;
  prometheus::Gauge* vjps_per_second_;
  prometheus::Histogram* model_load_;
  prometheus::Family<prometheus::Counter>* auth_refusals_;
  prometheus::Counter* tokens_reload_failures_;
  prometheus::Family<prometheus::Gauge>* queue_depth_;
  prometheus::Family<prometheus::Gauge>* device_memory_;
  std::function<std::map<std::string, int64_t>()> queue_depth_source_;
  std::function<std::map<std::string, double>()> device_memory_source_;
  std::mutex sources_mutex_;
};

// Serves GET /metrics (and /healthz) from a Metrics object on its own thread.
class MetricsHttpServer {
 public:
  MetricsHttpServer(Metrics* metrics, std::string host, int port);
  ~MetricsHttpServer();

  // Binds (port 0 picks a free port) and starts serving; errors name the address.
  absl::Status Start();
  int port() const { return bound_port_; }
  void Stop();

 private:
  Metrics* metrics_;
  std::string host_;
  int port_;
  int bound_port_ = 0;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
};

}  // namespace posbias::metrics
