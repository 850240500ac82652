// SPDX-License-Identifier: MIT
// A step simulated in its own power state (engine/power_runs.hpp): the result is a fixed point of
// the solve, its activity adds up to the step, and a file without a power model runs once, as a
// plain engine run.
#include <doctest/doctest.h>

#include <cmath>

#include "engine/power_runs.hpp"
#include "graph/step_graph.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;

namespace {

// Llama 3.1 8B's shapes in 4 layers on one H100 (the trace harness's llama8b; compute, memory-bound
// kernels, FSDP2 copies and host gaps all in one step).
Scenario llama8b() { return load_scenario(read_input("scenarios/trace/llama8b-s8k-mb1.json", "scenarios", "SCENARIO")); }

std::vector<StepResult> run_once(const StepGraph& g, const CostModel& cost) {
  Engine engine(g, cost);
  return {engine.run(EngineOptions{})};
}

}  // namespace

TEST_CASE("a step's activity splits its step time: compute by class, the rest idle or memory-bound") {
  const Scenario s = llama8b();
  const StepGraph g = build_step_graph(s);
  const StepResult r = run_once(g, CostModel(s.hardware)).front();
  const StepActivity a = step_activity(r);
  double bubble = 0;
  for (const auto& [cause, ps] : r.exposed) {
    if (cause == "pipeline_bubble") bubble += static_cast<double>(ps) * 1e-12;
  }
  const double total = a.busy[0] + a.busy[1] + a.busy[2] + a.idle + bubble;
  CHECK(total == doctest::Approx(static_cast<double>(r.step_time) * 1e-12).epsilon(1e-9));
  CHECK(a.busy[static_cast<size_t>(PowerClass::gemm)] > 0);
  CHECK(a.busy[static_cast<size_t>(PowerClass::attention)] > 0);
  CHECK(a.busy[static_cast<size_t>(PowerClass::memory)] > 0);
}

TEST_CASE("a slow part's activity is counted at the state's rates: its compute classes' time over its slowdown") {
  const Scenario s = llama8b();
  const StepGraph g = build_step_graph(s);
  const StepResult r = run_once(g, CostModel(s.hardware)).front();
  StepResult slowed = r;  // the same step as if the slowest rank ran compute-bound kernels twice as long
  slowed.slowest_rank_compute_slowdown = 2;
  for (auto& [kind, ps] : slowed.compute_busy) {
    if (power_class(kind) != PowerClass::memory) ps *= 2;
  }
  const StepActivity a = step_activity(r), b = step_activity(slowed);
  for (size_t c = 0; c < kNumPowerClasses; ++c) CHECK(b.busy[c] == doctest::Approx(a.busy[c]).epsilon(1e-12));
  CHECK(b.idle == a.idle);
}

TEST_CASE("simulate_in_power_state returns a step in the state its own activity solves") {
  const Scenario s = llama8b();
  REQUIRE(has_power_model(s.hardware));
  const StepGraph g = build_step_graph(s);
  const PoweredSteps p = simulate_in_power_state(CostModel(s.hardware), [&](const CostModel& c) { return run_once(g, c); });
  CHECK(p.runs >= 2);  // from the fixed state: GEMMs beside memory-bound kernels are not the reference state
  CHECK(p.runs <= kMaxPowerStateRuns);
  CHECK(p.state.solved);
  // From the graph's static guess the first simulation already runs in the settled state, and the
  // step is the same within the tolerance.
  const PoweredSteps guessed = simulate_step_in_power_state(g, CostModel(s.hardware), EngineOptions{});
  CHECK(guessed.runs == 1);
  CHECK(guessed.state.close_to(p.state, 2 * kPowerStateTolerance));
  CHECK(static_cast<double>(guessed.results.front().step_time) ==
        doctest::Approx(static_cast<double>(p.results.front().step_time)).epsilon(2 * kPowerStateTolerance));
  // The fixed point: solving from the returned step gives back its state.
  const PowerState again = solve_power_state(s.hardware, mean_activity(p.results), p.state);
  CHECK(again.close_to(p.state, kPowerStateTolerance));
  // The GEMMs run faster than back to back at the limit, the step is shorter than at the fixed state.
  CHECK(p.state.rate_of(PowerClass::gemm) > 1);
  const StepResult fixed = run_once(g, CostModel(s.hardware)).front();
  CHECK(p.results.front().step_time < fixed.step_time);
  CHECK(p.state.watts == doctest::Approx(s.hardware.device.power->limit.value).epsilon(0.01));
}

TEST_CASE("without a power model the step runs once, as the engine alone runs it") {
  Scenario s = llama8b();
  s.hardware.device.power->dynamic_power.reset();
  s.hardware.device.power->idle_power.reset();
  REQUIRE(!has_power_model(s.hardware));
  const StepGraph g = build_step_graph(s);
  const PoweredSteps p = simulate_in_power_state(CostModel(s.hardware), [&](const CostModel& c) { return run_once(g, c); });
  CHECK(p.runs == 1);
  CHECK(!p.state.solved);
  CHECK(p.results.front().step_time == run_once(g, CostModel(s.hardware)).front().step_time);
}
