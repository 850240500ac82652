// SPDX-License-Identifier: MIT
// Strategy search throughput on scenarios/k3-sweep.json: configurations per minute through the
// whole pipeline of `moesim sweep` (load and check, memory bound, graph build when the structure
// changes, engine for the scenario's sampled steps), on a fixed slice of the sweep so that a run
// takes seconds: every k-th block of configurations sharing a graph (k = blocks / 64), which keeps
// the sweep's mix of rejected, pruned and simulated configurations. Arg: threads, each with its
// own ConfigEvaluator, as run_sweep uses them.
//
//   build/bench/bench_sweep --benchmark_repetitions=5 --benchmark_report_aggregates_only
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "graph/step_graph.hpp"
#include "search/memory_bound.hpp"
#include "search/sweep.hpp"

namespace {

using namespace moesim;

const SweepSpace& k3_sweep() {
  static const SweepSpace space(read_input("k3-sweep", "scenarios", "SCENARIO"));
  return space;
}

// The slice: 64 blocks spread evenly over the sweep.
std::vector<int64_t> slice_blocks(const SweepSpace& space) {
  const int64_t blocks = space.num_configs() / space.block_size();
  const int64_t stride = std::max<int64_t>(1, blocks / 64);
  std::vector<int64_t> out;
  for (int64_t b = 0; b < blocks && out.size() < 64; b += stride) out.push_back(b);
  return out;
}

void BM_K3SweepSlice(benchmark::State& state) {
  const SweepSpace& space = k3_sweep();
  const std::vector<int64_t> blocks = slice_blocks(space);
  const auto threads = static_cast<size_t>(state.range(0));
  int64_t configs = 0;
  int64_t simulated = 0;
  int64_t graphs = 0;
  double wall_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    std::atomic<size_t> next{0};
    std::atomic<int64_t> sims{0};
    std::atomic<int64_t> built{0};
    auto work = [&] {
      ConfigEvaluator ev(space, true);  // fresh per iteration: no graph survives between runs
      for (size_t b = next++; b < blocks.size(); b = next++) {
        for (int64_t i = 0; i < space.block_size(); ++i) {
          const ConfigOutcome o = ev.evaluate(blocks[b] * space.block_size() + i);
          if (o.status == ConfigStatus::simulated) ++sims;
        }
      }
      built += ev.num_graphs_built();
    };
    std::vector<std::thread> pool;
    for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    configs += static_cast<int64_t>(blocks.size()) * space.block_size();
    simulated += sims;
    graphs += built;
    wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  // Per minute of wall time (Counter::kIsRate would print "/s").
  state.counters["configs_per_min"] = 60.0 * static_cast<double>(configs) / wall_s;
  state.counters["simulated_per_min"] = 60.0 * static_cast<double>(simulated) / wall_s;
  state.counters["configs"] = static_cast<double>(configs) / static_cast<double>(state.iterations());
  state.counters["simulated"] = static_cast<double>(simulated) / static_cast<double>(state.iterations());
  state.counters["graphs_built"] = static_cast<double>(graphs) / static_cast<double>(state.iterations());
}

// Loading and checking alone (every configuration of the slice, no simulation): the floor of the
// per-configuration cost.
void BM_K3SweepLoadOnly(benchmark::State& state) {
  const SweepSpace& space = k3_sweep();
  const std::vector<int64_t> blocks = slice_blocks(space);
  int64_t configs = 0;
  double wall_s = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    for (int64_t b : blocks) {
      for (int64_t i = 0; i < space.block_size(); ++i) {
        benchmark::DoNotOptimize(space.load(b * space.block_size() + i));
        ++configs;
      }
    }
    wall_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }
  state.counters["configs_per_min"] = 60.0 * static_cast<double>(configs) / wall_s;
}

// The graph builds alone: one per block of the slice that reaches simulation (where the time of
// BM_K3SweepSlice goes that the engine does not take).
void BM_K3SweepGraphsOnly(benchmark::State& state) {
  const SweepSpace& space = k3_sweep();
  std::vector<Scenario> structures;
  for (int64_t b : slice_blocks(space)) {
    LoadedConfig c = space.load(b * space.block_size());
    if (c.scenario &&
        !cannot_fit(persistent_lower_bound_bytes(*c.scenario), c.scenario->hardware.device.hbm_capacity.value)) {
      structures.push_back(std::move(*c.scenario));
    }
  }
  for (auto _ : state) {
    for (const Scenario& s : structures) benchmark::DoNotOptimize(build_step_graph(s));
  }
  state.counters["graphs"] = static_cast<double>(structures.size());
}

BENCHMARK(BM_K3SweepSlice)->Arg(1)->Arg(2)->Unit(benchmark::kSecond)->UseRealTime()->Iterations(1);
BENCHMARK(BM_K3SweepLoadOnly)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_K3SweepGraphsOnly)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
