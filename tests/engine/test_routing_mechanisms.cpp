// SPDX-License-Identifier: MIT
// Routing mechanisms in whole simulated steps: capacity padding runs every grouped GEMM at exactly
// C rows (the cost model's closed form), dropping caps the skewed step, node- and device-limited
// routing cut the expert all-to-all, and bias balancing brings a skewed start towards balance over
// sampled steps (StepResult::ep_load_imbalance).
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"
#include "graph/graph_stats.hpp"

using namespace moesim;
using test::Plan;

namespace {

// test::qwen3_two_nodes with `routing` and `dispatch`.
Plan two_nodes(const std::string& routing, const std::string& dispatch = "direct") {
  Plan p = test::qwen3_two_nodes();
  p.ep_dispatch = dispatch;
  p.routing = routing;
  return p;
}

Picoseconds all_to_all_busy(const StepResult& r) {
  for (const auto& [kind, t] : r.comm_busy) {
    if (kind == OpKind::all_to_all) return t;
  }
  return 0;
}

struct Run {
  Scenario scenario;
  StepGraph graph;
  CostModel cost;
  explicit Run(const Plan& p) : scenario(test::scenario(p)), graph(build_step_graph(scenario)), cost(scenario.hardware) {}
  StepResult step(int64_t step = 0, bool record = false) {
    EngineOptions o;
    o.step = step;
    o.record_timeline = record;
    return Engine(graph, cost).run(o);
  }
};

// Bytes of the expert-side buffers named `name` (the permuted rows) over every program.
double buffer_bytes(const StepGraph& g, const std::string& name) {
  double bytes = 0;
  for (const Program& p : g.programs) {
    for (const Buffer& b : p.buffers) {
      if (p.names[b.name].ends_with(name)) bytes += b.bytes;
    }
  }
  return bytes;
}

}  // namespace

TEST_CASE("padding to capacity: every routed grouped GEMM runs at exactly C rows per expert") {
  Run run(two_nodes(R"({"distribution": "skewed", "skew": 1.0, "capacity_factor": 1.25, "capacity_policy": "pad"})"));
  const StepResult r = run.step(0, true);
  const int64_t tokens = run.graph.routed_tokens_per_micro_batch();
  // C = ceil(1.25 * 16 ranks * T * 8 / 128), and a rank's 8 experts each get C rows.
  const auto capacity = static_cast<int64_t>(std::ceil(1.25 * 16.0 * static_cast<double>(tokens) * 8 / 128));
  CHECK(run.graph.routing->expert_capacity(tokens) == capacity);
  int checked = 0;
  for (const ExecRecord& e : r.timeline.records) {
    const Op& op = run.graph.programs[static_cast<size_t>(e.program)].ops[e.op];
    if (op.kind != OpKind::grouped_gemm || op.routing_layer < 0) continue;
    CHECK(op.m == 8 * capacity);  // the graph's GEMM is the padded one, whatever the draw
    // The closed form at those rows, or it slowed by the overlap factor while a collective was in flight.
    const double alone = run.cost.kernel_seconds(op, 1.0);
    const auto ps = [](double s) { return static_cast<Picoseconds>(std::llround(s * 1e12)); };
    const Picoseconds took = e.end - e.start;
    CHECK((took == ps(alone) || took == ps(alone * (1 + run.cost.overlap_slowdown()))));
    ++checked;
  }
  CHECK(checked > 0);
  // Every member does the same padded work: the load balance is the capacity factor itself.
  CHECK(r.ep_load_imbalance == doctest::Approx(8.0 * static_cast<double>(capacity) / static_cast<double>(tokens * 8)));
}

TEST_CASE("padding to capacity holds its padded buffers in memory, and costs time without expert parallelism") {
  Run dropless(two_nodes("{}"));
  Run pad(two_nodes(R"({"capacity_factor": 1.25, "capacity_policy": "pad"})"));
  const int64_t tokens = dropless.graph.routed_tokens_per_micro_batch();
  const double padded_rows = 8.0 * static_cast<double>(pad.graph.routing->expert_capacity(tokens));
  // The dispatch's send buffers (and every buffer after them up to the combine) grow by C E/ep / T k.
  const double ratio = padded_rows / static_cast<double>(tokens * 8);
  CHECK(ratio == doctest::Approx(1.25));
  CHECK(buffer_bytes(pad.graph, "moe.permuted") == doctest::Approx(ratio * buffer_bytes(dropless.graph, "moe.permuted")));
  CHECK(buffer_bytes(dropless.graph, "moe.permuted") > 0);
  CHECK(pad.step().memory.at(0).peak_hbm_bytes > dropless.step().memory.at(0).peak_hbm_bytes);
  // The padding is hardware work, not model work: MFU's FLOPs stay those of the T k real rows.
  const GraphStats padded_stats = compute_stats(pad.graph), dropless_stats = compute_stats(dropless.graph);
  CHECK(padded_stats.model_flops_per_step == doctest::Approx(dropless_stats.model_flops_per_step).epsilon(1e-12));
  CHECK(padded_stats.flops_per_step > dropless_stats.flops_per_step);
  // EP 1: no routing draw to scale by, so the padding must be in the graph's GEMMs themselves.
  Plan one = two_nodes("{}");
  one.devices = 1;
  one.shard = 1;
  one.ep = 1;
  one.global_batch = 1;
  Plan one_pad = one;
  one_pad.routing = R"({"capacity_factor": 1.25, "capacity_policy": "pad"})";
  Run a(one), b(one_pad);
  CHECK(b.step().step_time > a.step().step_time);
}

TEST_CASE("dropping at capacity: the skewed step's experts never exceed C, and it is no slower than dropless") {
  Run dropless(two_nodes(R"({"distribution": "skewed", "skew": 1.0})"));
  Run drop(two_nodes(R"({"distribution": "skewed", "skew": 1.0, "capacity_factor": 1.0})"));
  const StepResult a = dropless.step(), b = drop.step();
  CHECK(a.ep_load_imbalance > 1.2);  // Zipf 1.0: some rank holds well over its share
  // Drop at 1.0: no rank above its experts' capacity, C = ceil(T k / E * ep) per expert.
  CHECK(b.ep_load_imbalance <= 1.0 + 1e-9);
  CHECK(b.step_time < a.step_time);
  CHECK(all_to_all_busy(b) < all_to_all_busy(a));  // dropped assignments are not sent
}

TEST_CASE("uniform routing: dropless loads average the balanced load that padding at 1.0 fixes") {
  Run dropless(two_nodes("{}"));
  Run pad(two_nodes(R"({"capacity_factor": 1.0, "capacity_policy": "pad"})"));
  const StepResult a = dropless.step(), b = pad.step();
  CHECK(b.ep_load_imbalance == doctest::Approx(1.0));  // T k = 4096 * 8 = 32768 = 8 experts * C
  CHECK(a.ep_load_imbalance > 1.0);                    // the busiest of 16 sampled ranks
  CHECK(a.ep_load_imbalance < 1.05);
}

TEST_CASE("node- and device-limited routing cut the expert all-to-all") {
  Run free_h(two_nodes("{}", "hierarchical"));
  Run one_node_h(two_nodes(R"({"nodes_per_token": 1})", "hierarchical"));
  CHECK(one_node_h.graph.routing->limit_units() == 2);
  CHECK(all_to_all_busy(one_node_h.step()) < all_to_all_busy(free_h.step()));
  // Device-limited direct dispatch sends a token once per destination rank: 2 copies, not 8.
  Run free_d(two_nodes("{}"));
  Run two_devices(two_nodes(R"({"devices_per_token": 2})"));
  const StepResult a = free_d.step(), b = two_devices.step();
  CHECK(static_cast<double>(all_to_all_busy(b)) < 0.5 * static_cast<double>(all_to_all_busy(a)));
  // Uniform routing keeps the mean load: balance stays near 1 (the busiest of 16 sampled ranks).
  CHECK(b.ep_load_imbalance < 1.1);
}

TEST_CASE("bias balancing: a skewed start converges towards balance over sampled steps") {
  Run biased(two_nodes(R"({"distribution": "skewed", "skew": 1.0, "bias_update_speed": 0.2})"));
  Run skewed(two_nodes(R"({"distribution": "skewed", "skew": 1.0})"));
  const StepResult first = biased.step(0), later = biased.step(30), plain = skewed.step(30);
  CHECK(first.ep_load_imbalance == doctest::Approx(skewed.step(0).ep_load_imbalance));
  CHECK(later.ep_load_imbalance < first.ep_load_imbalance);
  CHECK(later.ep_load_imbalance < plain.ep_load_imbalance);
  CHECK(later.step_time < plain.step_time);
}
