// Load generator for a running posbias-server: density calls (EvaluateContinuum, one point) and
// grpc.health.v1.Health/Check at a fixed number of calls in flight, each kept full through the
// callback client API, optionally with WatchJob streams held open meanwhile. Prints one JSON line
// per case: calls, refusals (RESOURCE_EXHAUSTED), other errors, throughput, p50 / p99 latency.
//
// usage: load_bench --server HOST:PORT [--seconds S] [--inflight 1,64,1000] [--watches N --watch-job ID]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "CLI/CLI.hpp"
#include "grpc/health/v1/health.grpc.pb.h"
#include "posbias/v1/density_service.grpc.pb.h"
#include "posbias/v1/job_service.grpc.pb.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Tally {
  std::mutex mutex;
  std::vector<double> latencies_ms;
  int64_t refused = 0, errors = 0;
};

// Keeps `inflight` calls of `start` outstanding until `until`; `start(done)` begins one call and
// calls done(status) when it ends.
template <typename Start>
void Drive(int inflight, Clock::time_point until, Tally& tally, Start start) {
  std::mutex mutex;
  std::condition_variable all_done;
  int running = inflight;
  std::function<void()> launch = [&] {
    const auto begin = Clock::now();
    start([&, begin](const grpc::Status& status) {
      const double ms = std::chrono::duration<double, std::milli>(Clock::now() - begin).count();
      {
        std::lock_guard lock(tally.mutex);
        if (status.ok()) {
          tally.latencies_ms.push_back(ms);
        } else if (status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
          ++tally.refused;
        } else {
          ++tally.errors;
        }
      }
      if (Clock::now() < until) return launch();
      std::lock_guard lock(mutex);
      if (--running == 0) all_done.notify_all();
    });
  };
  for (int i = 0; i < inflight; ++i) launch();
  std::unique_lock lock(mutex);
  all_done.wait(lock, [&] { return running == 0; });
}

void Report(const std::string& name, int inflight, int watches, double seconds, Tally& tally) {
  auto& l = tally.latencies_ms;
  std::sort(l.begin(), l.end());
  auto at = [&](double q) { return l.empty() ? 0.0 : l[static_cast<size_t>(q * static_cast<double>(l.size() - 1))]; };
  std::printf(
      "{\"case\":\"%s\",\"inflight\":%d,\"watches\":%d,\"calls\":%zu,\"refused\":%lld,\"errors\":%lld,"
      "\"per_second\":%.0f,\"p50_ms\":%.3f,\"p99_ms\":%.3f}\n",
      name.c_str(), inflight, watches, l.size(), static_cast<long long>(tally.refused),
      static_cast<long long>(tally.errors), static_cast<double>(l.size()) / seconds, at(0.5), at(0.99));
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"load_bench: density and health calls against a running posbias-server"};
  std::string server, watch_job;
  double seconds = 5;
  std::vector<int> inflights = {1, 64, 1000};
  int watches = 0;
  app.add_option("--server", server, "HOST:PORT")->required();
  app.add_option("--seconds", seconds, "Duration of each case")->capture_default_str();
  app.add_option("--inflight", inflights, "Calls in flight per case")->delimiter(',');
  app.add_option("--watches", watches, "WatchJob streams held open during the cases");
  app.add_option("--watch-job", watch_job, "The job the streams watch (a queued job)");
  CLI11_PARSE(app, argc, argv);

  grpc::ChannelArguments arguments;
  arguments.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  auto channel = grpc::CreateCustomChannel(server, grpc::InsecureChannelCredentials(), arguments);
  auto density = posbias::v1::DensityService::NewStub(channel);
  auto health = grpc::health::v1::Health::NewStub(channel);
  auto jobs = posbias::v1::JobService::NewStub(channel);

  // Held-open watches: a reactor per stream that reads until the test ends.
  struct Watch : grpc::ClientReadReactor<posbias::v1::WatchJobResponse> {
    grpc::ClientContext context;
    posbias::v1::WatchJobResponse message;
    std::atomic<bool> done{false};
    void OnReadDone(bool ok) override {
      if (ok) StartRead(&message);
    }
    void OnDone(const grpc::Status&) override { done = true; }
  };
  std::vector<std::unique_ptr<Watch>> open;
  posbias::v1::WatchJobRequest watch_request;
  watch_request.set_id(watch_job);
  for (int i = 0; i < watches; ++i) {
    open.push_back(std::make_unique<Watch>());
    jobs->async()->WatchJob(&open.back()->context, &watch_request, open.back().get());
    open.back()->StartRead(&open.back()->message);
    open.back()->StartCall();
  }

  posbias::v1::EvaluateContinuumRequest request;
  request.mutable_model()->set_depth(24);
  request.mutable_model()->set_alpha(0.5);
  request.mutable_point_list()->add_x(0.5);
  for (int inflight : inflights) {
    for (const std::string name : {"health", "density"}) {
      Tally tally;
      const auto until = Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
      Drive(inflight, until, tally, [&](std::function<void(const grpc::Status&)> done) {
        auto context = std::make_shared<grpc::ClientContext>();
        if (name == "health") {
          auto ask = std::make_shared<grpc::health::v1::HealthCheckRequest>();
          auto answer = std::make_shared<grpc::health::v1::HealthCheckResponse>();
          health->async()->Check(context.get(), ask.get(), answer.get(),
                                 [context, ask, answer, done](grpc::Status status) { done(status); });
        } else {
          auto answer = std::make_shared<posbias::v1::EvaluateContinuumResponse>();
          density->async()->EvaluateContinuum(context.get(), &request, answer.get(),
                                              [context, answer, done](grpc::Status status) { done(status); });
        }
      });
      Report(name, inflight, watches, seconds, tally);
    }
  }
  for (auto& watch : open) watch->context.TryCancel();
  for (auto& watch : open) {
    while (!watch->done) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}
