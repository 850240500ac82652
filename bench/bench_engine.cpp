// SPDX-License-Identifier: MIT
// Simulating one training step of the default scenario (128 ranks, every op and collective), with
// the events per second the engine sustains. (1,024 devices take minutes today: see
// docs/performance.md.)
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "engine/engine.hpp"

namespace {

using namespace moesim;

void simulate(benchmark::State& state, const Scenario& s) {
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(g, cost);
  int64_t events = 0;
  for (auto _ : state) {
    const StepResult r = engine.run({});
    events += r.num_events;
    benchmark::DoNotOptimize(r.step_time);
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["peak_rss_MB"] = static_cast<double>(u.ru_maxrss) / 1024.0;
  state.counters["ranks"] = static_cast<double>(g.plan.num_ranks());
}

Scenario default_scenario() { return load_scenario(read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO")); }

void BM_SimulateDefault128(benchmark::State& state) { simulate(state, default_scenario()); }
BENCHMARK(BM_SimulateDefault128)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
