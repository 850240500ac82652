// SPDX-License-Identifier: MIT
// Sampled steps spread over worker threads give exactly what one engine running them in order
// gives: the same step times, per-rank ends and memory, step by step, whatever the thread count;
// only the first step records a timeline; progress is reported once per step; and a failing step
// is rethrown as the in-order run would have thrown it.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include "../graph/graph_test_util.hpp"
#include "deadlock_graph.hpp"
#include "engine/sampled_steps.hpp"

using namespace moesim;
using test::Plan;

namespace {

// Qwen3-30B-A3B with EP 16 over two nodes, skewed routing: every sampled step draws other loads.
Scenario skewed_moe() {
  Plan p = test::qwen3_two_nodes();
  p.routing = R"({"distribution": "skewed", "skew": 1.0})";
  return test::scenario(p);
}

void check_same(const StepResult& a, const StepResult& b) {
  CHECK(a.step_time == b.step_time);
  CHECK(a.rank_end == b.rank_end);
  CHECK(a.num_events == b.num_events);
  CHECK(a.ep_load_imbalance == b.ep_load_imbalance);
  CHECK(a.critical_path == b.critical_path);
  REQUIRE(a.memory.size() == b.memory.size());
  for (size_t r = 0; r < a.memory.size(); ++r) {
    CHECK(a.memory[r].peak_hbm_bytes == b.memory[r].peak_hbm_bytes);
    CHECK(a.memory[r].peak_time == b.memory[r].peak_time);
    CHECK(a.memory[r].peak_op == b.memory[r].peak_op);
  }
}

}  // namespace

TEST_CASE("steps over threads are the steps of one engine in order, for any thread count") {
  const Scenario s = skewed_moe();
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  constexpr int64_t kSteps = 5;
  std::vector<StepResult> in_order;
  Engine engine(g, cost);
  for (int64_t step = 0; step < kSteps; ++step) {
    EngineOptions o;
    o.step = step;
    in_order.push_back(engine.run(o));
  }
  // The draws differ from step to step, so matching step by step is a real check of the order.
  std::set<Picoseconds> distinct;
  for (const StepResult& r : in_order) distinct.insert(r.step_time);
  CHECK(distinct.size() > 1);

  for (const int64_t threads : {1, 2, 3, 8, -8}) {  // -8: eight asked for, a memory budget for one engine
    CAPTURE(threads);
    std::vector<int64_t> reported;
    SampledStepsOptions so;
    so.steps = kSteps;
    so.threads = threads < 0 ? -threads : threads;
    if (threads < 0) so.memory_budget_bytes = 1.5 * engine_state_bytes(g);
    so.timeline_of_first_step = true;
    so.on_step = [&](int64_t done) { reported.push_back(done); };
    const std::vector<StepResult> spread = run_sampled_steps(g, cost, EngineOptions{}, so);
    REQUIRE(spread.size() == static_cast<size_t>(kSteps));
    for (int64_t step = 0; step < kSteps; ++step) check_same(spread[static_cast<size_t>(step)], in_order[static_cast<size_t>(step)]);
    CHECK(reported == std::vector<int64_t>{1, 2, 3, 4, 5});
    CHECK(!spread[0].timeline.records.empty());
    for (int64_t step = 1; step < kSteps; ++step) CHECK(spread[static_cast<size_t>(step)].timeline.records.empty());
  }
}

TEST_CASE("workers: as asked, at most one per step, and only as many engines as the memory budget holds") {
  const Scenario s = skewed_moe();
  const StepGraph g = build_step_graph(s);
  const double engine = engine_state_bytes(g);
  // Every rank's ops of its program, at 16 bytes each: 16 ranks of one program here.
  CHECK(engine == doctest::Approx(16.0 * 16 * static_cast<double>(g.programs.at(0).ops.size())));
  CHECK(g.programs.size() == 1);
  SampledStepsOptions so;
  so.steps = 4;
  so.threads = 8;
  EngineOptions every_rank;
  CHECK(sampled_step_workers(g, every_rank, so) == 4);  // one per step
  so.threads = 3;
  CHECK(sampled_step_workers(g, every_rank, so) == 3);
  so.threads = 0;
  CHECK(sampled_step_workers(g, every_rank, so) == 1);
  so.threads = 8;
  so.memory_budget_bytes = 2.5 * engine;
  CHECK(sampled_step_workers(g, every_rank, so) == 2);
  so.memory_budget_bytes = 0.5 * engine;
  CHECK(sampled_step_workers(g, every_rank, so) == 1);  // always one
  EngineOptions distinct;
  distinct.distinct_ranks = true;  // one rank per class: the estimate does not apply
  CHECK(sampled_step_workers(g, distinct, so) == 4);
}

TEST_CASE("a step that cannot finish is rethrown, as the in-order run throws it") {
  const StepGraph g = test::two_stage_deadlock();
  const HardwareSpec hw = load_hardware(read_input("h200-hgx", "hardware", "HARDWARE"));
  const CostModel cost(hw);
  std::string expected;
  try {
    Engine(g, cost).run({});
  } catch (const SimulationError& e) {
    expected = e.what();
  }
  REQUIRE(!expected.empty());
  for (const int64_t threads : {1, 2, 4}) {
    CAPTURE(threads);
    SampledStepsOptions so;
    so.steps = 6;
    so.threads = threads;
    int64_t reported = 0;
    so.on_step = [&](int64_t) { ++reported; };
    try {
      (void)run_sampled_steps(g, cost, EngineOptions{}, so);
      FAIL("a deadlocked step must not return");
    } catch (const SimulationError& e) {
      CHECK(std::string(e.what()) == expected);
    }
    CHECK(reported == 0);
  }
}

TEST_CASE("an engine's later runs report the memory a fresh engine gives them (slab tracks kept between runs)") {
  const Scenario s = skewed_moe();
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine reused(g, cost);
  for (int64_t run = 0; run < 6; ++run) {
    EngineOptions o;
    o.step = run % 3;                  // steps drawn again, and in another order
    o.distinct_ranks = run % 2 == 1;  // other slots from run to run
    CAPTURE(run);
    const StepResult kept = reused.run(o);
    Engine fresh_engine(g, cost);
    const StepResult fresh = fresh_engine.run(o);
    check_same(kept, fresh);
    for (size_t r = 0; r < kept.memory.size(); ++r) {
      CHECK(kept.memory[r].slab_bytes > 0);
      CHECK(kept.memory[r].slab_bytes == fresh.memory[r].slab_bytes);
      CHECK(kept.memory[r].allocator_reserve_bytes == fresh.memory[r].allocator_reserve_bytes);
    }
  }
}
