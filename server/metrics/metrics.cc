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
  return absl::OkStatus();
}

void MetricsHttpServer::Stop() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

}  // namespace posbias::metrics
