// SPDX-License-Identifier: MIT
// Simulating one training step: the default scenario (128 ranks) with every rank, op and
// collective, and with one representative per class of interchangeable ranks (distinct_ranks);
// then the same plan on 8 and 128 supernodes (1,024 and 16,384 devices, HSDP across supernodes).
// Each iteration builds the graph and runs one sampled step, as `moesim simulate --steps 1` does.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "engine/engine.hpp"

namespace {

using namespace moesim;

Scenario on_supernodes(int64_t supernodes) {
  Scenario s = load_scenario(read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO"));
  s.spec.num_devices = 128 * supernodes;
  s.spec.parallel.fsdp.replicate = supernodes;  // one FSDP2 shard group per supernode
  s.spec.batch.global_batch_size = 256 * supernodes;
  return s;
}

void simulate(benchmark::State& state, const Scenario& s, bool distinct) {
  int64_t events = 0;
  int64_t simulated = 0;
  for (auto _ : state) {
    const StepGraph g = build_step_graph(s);
    const CostModel cost(s.hardware);
    Engine engine(g, cost);
    EngineOptions o;
    o.distinct_ranks = distinct;
    const StepResult r = engine.run(o);
    events += r.num_events;
    simulated = r.num_simulated_ranks;
    benchmark::DoNotOptimize(r.step_time);
  }
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  state.counters["events_per_s"] = benchmark::Counter(static_cast<double>(events), benchmark::Counter::kIsRate);
  state.counters["peak_rss_MB"] = static_cast<double>(u.ru_maxrss) / 1024.0;
  state.counters["ranks"] = static_cast<double>(s.spec.num_devices);
  state.counters["simulated_ranks"] = static_cast<double>(simulated);
}

void BM_Default128AllRanks(benchmark::State& state) { simulate(state, on_supernodes(1), false); }
void BM_Default128Distinct(benchmark::State& state) { simulate(state, on_supernodes(1), true); }
void BM_1024Distinct(benchmark::State& state) { simulate(state, on_supernodes(8), true); }
void BM_16384Distinct(benchmark::State& state) { simulate(state, on_supernodes(128), true); }
BENCHMARK(BM_Default128AllRanks)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Default128Distinct)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_1024Distinct)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_16384Distinct)->Unit(benchmark::kMillisecond);

}  // namespace
