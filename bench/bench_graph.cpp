// SPDX-License-Identifier: MIT
// Building the op graph of one training step: the default scenario (128 ranks) and a
// 16,384-device plan (128 supernodes, HSDP over them). Reports the graph's own memory (vector
// capacities of every program) and the process's peak RSS.
#include <benchmark/benchmark.h>
#include <sys/resource.h>

#include "graph/step_graph.hpp"

namespace {

using namespace moesim;

double graph_bytes(const StepGraph& g) {
  double b = 0;
  for (const Program& p : g.programs) {
    b += static_cast<double>(p.ops.capacity() * sizeof(Op) + p.tensors.capacity() * sizeof(TensorDesc) +
                             p.effects.capacity() * sizeof(MemEffect) + p.deps.capacity() * sizeof(uint32_t) +
                             p.buffers.capacity() * sizeof(Buffer));
    for (const auto& n : p.names) b += static_cast<double>(n.capacity() + sizeof(std::string));
  }
  return b;
}

double peak_rss_bytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;
}

Scenario default_scenario() { return load_scenario(read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO")); }

void report(benchmark::State& state, const StepGraph& g) {
  size_t ops = 0;
  for (const Program& p : g.programs) ops += p.ops.size();
  state.counters["ranks"] = static_cast<double>(g.plan.num_ranks());
  state.counters["program_ops"] = static_cast<double>(ops);
  state.counters["graph_MB"] = graph_bytes(g) / 1e6;
  state.counters["peak_rss_MB"] = peak_rss_bytes() / 1e6;
}

void BM_BuildDefault128(benchmark::State& state) {
  const Scenario s = default_scenario();
  for (auto _ : state) {
    StepGraph g = build_step_graph(s);
    benchmark::DoNotOptimize(g.programs.data());
    state.PauseTiming();
    report(state, g);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_BuildDefault128)->Unit(benchmark::kMillisecond);

void BM_Build16384(benchmark::State& state) {
  Scenario s = default_scenario();
  s.spec.num_devices = 16384;
  s.spec.parallel.fsdp.replicate = 128;  // one FSDP2 shard group per supernode, HSDP across them
  s.spec.batch.global_batch_size = 256 * 128;
  for (auto _ : state) {
    StepGraph g = build_step_graph(s);
    benchmark::DoNotOptimize(g.programs.data());
    state.PauseTiming();
    report(state, g);
    state.ResumeTiming();
  }
}
BENCHMARK(BM_Build16384)->Unit(benchmark::kMillisecond);

}  // namespace
