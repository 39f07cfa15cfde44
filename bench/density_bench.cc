// Closed-form and discrete throughput of the density room (bench/run.sh compares it side by side
// with a vectorized NumPy/SciPy baseline of the same formulas, bench/baseline_numpy.py).
//
// Points: 20000 x, log-uniform in [1e-300, 1] from a fixed seed, alpha = 1/2 (as the baseline).
#include <cmath>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "server/density/continuum.h"
#include "server/density/discrete.h"

namespace posbias::density {
namespace {

constexpr size_t kPoints = 20000;

std::vector<double> LogUniformPoints() {
  std::mt19937_64 generator(12345);
  std::uniform_real_distribution<double> exponent(-300.0, 0.0);
  std::vector<double> x(kPoints);
  for (double& value : x) value = std::pow(10.0, exponent(generator));
  return x;
}

void BM_ContinuumDensity(benchmark::State& state) {
  const ContinuumProfile profile(*MakeRouting(static_cast<uint32_t>(state.range(0)), 0.5));
  const std::vector<double> x = LogUniformPoints();
  std::vector<double> density(kPoints), log_density(kPoints);
  for (auto _ : state) {
    profile.EvaluateDensity(x, density, log_density);
    benchmark::DoNotOptimize(density.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kPoints));
}
BENCHMARK(BM_ContinuumDensity)->Arg(12)->Arg(24)->Arg(96)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_ContinuumCdf(benchmark::State& state) {
  const ContinuumProfile profile(*MakeRouting(static_cast<uint32_t>(state.range(0)), 0.5));
  const std::vector<double> x = LogUniformPoints();
  std::vector<double> cdf(kPoints);
  for (auto _ : state) {
    profile.EvaluateCdf(x, cdf, {});
    benchmark::DoNotOptimize(cdf.data());
  }
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations() * kPoints));
}
BENCHMARK(BM_ContinuumCdf)->Arg(12)->Arg(24)->Arg(96)->Arg(1000)->Unit(benchmark::kMillisecond);

void BM_DiscreteProfile(benchmark::State& state) {
  const Routing routing = *MakeRouting(24, 0.5);
  DiscreteOptions options;
  options.incoherent = false;
  for (auto _ : state) {
    auto profiles = ComputeDiscreteProfiles(routing, 1'000'000, options);
    benchmark::DoNotOptimize(profiles->coherent.data());
  }
}
BENCHMARK(BM_DiscreteProfile)->Unit(benchmark::kMillisecond);

}  // namespace
}  // namespace posbias::density

BENCHMARK_MAIN();
