// SPDX-License-Identifier: MIT
// The step report checks its own laws: a result that breaks one (time not accounted for, a
// device above its peak, negative memory) is an error, never a printed number.
#include <doctest/doctest.h>

#include <map>
#include <stdexcept>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"
#include "graph/graph_stats.hpp"
#include "report/step_report.hpp"
#include "scenario/device_spread.hpp"

using namespace moesim;

TEST_CASE("a step report refuses results that break its invariants") {
  test::Plan p;
  p.ep = 8;
  p.global_batch = 16;
  p.seq = 2048;
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  const GraphStats stats = compute_stats(g);
  const StepResult good = Engine(g, cost).run({});
  const StepReport r = make_step_report(s, g, stats, {good}, 0.0);
  CHECK(r.mfu > 0);
  CHECK(r.mfu <= r.hfu);
  CHECK(r.hfu <= 1);

  StepResult unaccounted = good;  // a cause of exposed time lost
  REQUIRE(!unaccounted.exposed.empty());
  unaccounted.exposed.pop_back();
  CHECK_THROWS_AS(make_step_report(s, g, stats, {unaccounted}, 0.0), std::logic_error);

  StepResult too_fast = good;  // a step shorter than the FLOPs allow at peak
  too_fast.step_time /= 1000;
  too_fast.compute_stream_busy /= 1000;
  too_fast.exposed.clear();
  too_fast.exposed.emplace_back("other", too_fast.step_time - too_fast.compute_stream_busy);
  CHECK_THROWS_AS(make_step_report(s, g, stats, {too_fast}, 0.0), std::logic_error);

  StepResult negative = good;
  negative.memory[3].min_hbm_bytes = -1e6;
  CHECK_THROWS_AS(make_step_report(s, g, stats, {negative}, 0.0), std::logic_error);
}

TEST_CASE("the report names the groups that span scale-up domains") {
  auto spanning = [](int64_t ep) {
    test::Plan p;  // qwen3-30b-a3b over 16 H200s in 8-GPU NVLink nodes, FSDP2 16
    p.devices = 16;
    p.shard = 16;
    p.ep = ep;
    p.global_batch = 16;
    p.seq = 1024;
    const Scenario s = test::scenario(p);
    const StepGraph g = build_step_graph(s);
    const StepResult r = Engine(g, CostModel(s.hardware)).run({});
    std::map<std::string, int64_t> out;
    for (const auto& sg : make_step_report(s, g, compute_stats(g), {r}, 0.0).groups_across_domains) out[sg.kind] = sg.num_domains;
    return out;
  };
  const auto ep8 = spanning(8);
  CHECK(ep8.at("fsdp") == 2);       // the shard group spans both nodes
  CHECK(!ep8.contains("ep"));       // 8 consecutive ranks: one node
  CHECK(spanning(16).at("ep") == 2);
}

TEST_CASE("the report names the slowest part where the hardware has a speed spread, and only there") {
  test::Plan p;
  p.model = "llama-3.1-8b";
  p.seq = 2048;
  Scenario s = test::scenario(p);  // 8 devices
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  const GraphStats stats = compute_stats(g);
  s.hardware.device.speed_spread = 0.02;
  EngineOptions o;
  o.rank_compute_slowdown = rank_compute_slowdowns(s);
  const StepReport r = make_step_report(s, g, stats, {Engine(g, cost).run(o)}, 0.0);
  CHECK(r.slow_part_rank == 7);
  CHECK(r.slow_part_slowdown == doctest::Approx(1 + 0.02 * 1.4236003060).epsilon(1e-10));
  CHECK(step_report_text(r).find("slowest part      rank 7") != std::string::npos);
  CHECK(step_report_json(r).find("\"slowest_part\"") != std::string::npos);

  s.hardware.device.speed_spread = 0;
  const StepReport none = make_step_report(s, g, stats, {Engine(g, cost).run({})}, 0.0);
  CHECK(none.slow_part_rank == -1);
  CHECK(step_report_text(none).find("slowest part") == std::string::npos);
  CHECK(step_report_json(none).find("\"slowest_part\"") == std::string::npos);
}
