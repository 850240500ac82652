// SPDX-License-Identifier: MIT
// A step simulated in its own power state (cost/power_state.hpp). The clock depends on the power
// the step's mix of kernels draws, and the kernels' times on the clock, so the state is a fixed
// point: simulate at the hardware file's fixed state, solve the state the step's activity draws,
// simulate again in it, until the state moves by less than kPowerStateTolerance.
#pragma once

#include <functional>
#include <vector>

#include "cost/cost_model.hpp"
#include "cost/power_state.hpp"
#include "engine/engine.hpp"
#include "graph/step_graph.hpp"

namespace moesim {

inline constexpr double kPowerStateTolerance = 0.005;  // relative, on every class's rate
inline constexpr int kMaxPowerStateRuns = 3;

// What the step-ending rank's compute stream did (StepResult::compute_busy and exposed) in the
// power model's classes: compute kernels by class; waits for collectives and FSDP2's copies as
// memory-bound work (their kernels move bytes); waits for the host, swaps and the rest as idle;
// pipeline bubbles left out (they outlast the power controller's window).
StepActivity step_activity(const StepResult& r);
// The mean over sampled steps.
StepActivity mean_activity(const std::vector<StepResult>& results);

// A first guess of a step's activity before any simulation: the compute-queue ops' kernel times
// in `cost`, by class, of the busiest program (pipeline stage), no idle time. For GPU-bound steps it
// is close enough that the first simulation already runs in the settled state.
StepActivity static_activity(const StepGraph& graph, const CostModel& cost);

struct PoweredSteps {
  std::vector<StepResult> results;
  PowerState state;  // the state `results` ran in
  int runs = 0;      // simulations it took (1: the fixed state, no power model)
};

// Calls simulate(cost) with `base` (a cost model at its hardware's fixed_power_state) and, where the
// file has a power model (has_power_model), again in the state the results' mean activity solves,
// until the state moves by less than kPowerStateTolerance or kMaxPowerStateRuns simulations ran.
// With `graph`, the first simulation runs in the state static_activity solves instead of the fixed
// one (usually the settled state: one simulation).
PoweredSteps simulate_in_power_state(const CostModel& base,
                                     const std::function<std::vector<StepResult>(const CostModel&)>& simulate,
                                     const StepGraph* graph = nullptr);

// One step of `graph` (an engine run with `options`) in its power state: the results hold that
// one StepResult.
PoweredSteps simulate_step_in_power_state(const StepGraph& graph, const CostModel& base, const EngineOptions& options);

}  // namespace moesim
