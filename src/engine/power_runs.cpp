// SPDX-License-Identifier: MIT
#include "engine/power_runs.hpp"

#include "graph/queues.hpp"

namespace moesim {

StepActivity step_activity(const StepResult& r) {
  StepActivity a;
  for (const auto& [kind, ps] : r.compute_busy) {
    // At the state's rates: a slow part's compute-bound kernels ran slowdown x longer than there.
    const PowerClass c = power_class(kind);
    const double slowdown = c == PowerClass::memory ? 1.0 : r.slowest_rank_compute_slowdown;
    a.busy[static_cast<size_t>(c)] += static_cast<double>(ps) * 1e-12 / slowdown;
  }
  for (const auto& [cause, ps] : r.exposed) {
    const double s = static_cast<double>(ps) * 1e-12;
    if (cause == "pipeline_bubble") continue;
    if (cause == "host" || cause == "swap" || cause == "other") {
      a.idle += s;
    } else {  // a collective's kind, or data_parallel
      a.busy[static_cast<size_t>(PowerClass::memory)] += s;
    }
  }
  return a;
}

StepActivity static_activity(const StepGraph& graph, const CostModel& cost) {
  StepActivity busiest;
  double most = -1;
  for (const Program& p : graph.programs) {
    StepActivity a;
    for (const Op& op : p.ops) {
      if (queue_of(op) != kComputeQueue || is_communication(op.kind)) continue;
      a.busy[static_cast<size_t>(power_class(op.kind))] += cost.kernel_seconds(op, 1.0);
    }
    const double total = a.busy[0] + a.busy[1] + a.busy[2];
    if (total > most) {
      most = total;
      busiest = a;
    }
  }
  return busiest;
}

StepActivity mean_activity(const std::vector<StepResult>& results) {
  StepActivity m;
  for (const StepResult& r : results) {
    const StepActivity a = step_activity(r);
    for (size_t c = 0; c < kNumPowerClasses; ++c) m.busy[c] += a.busy[c];
    m.idle += a.idle;
  }
  const double n = results.empty() ? 1.0 : static_cast<double>(results.size());
  for (double& b : m.busy) b /= n;
  m.idle /= n;
  return m;
}

PoweredSteps simulate_in_power_state(const CostModel& base,
                                     const std::function<std::vector<StepResult>(const CostModel&)>& simulate,
                                     const StepGraph* graph) {
  const HardwareSpec& hw = base.hardware();
  PoweredSteps out;
  out.state = base.power_state();
  if (graph && has_power_model(hw)) out.state = solve_power_state(hw, static_activity(*graph, base), out.state);
  out.results = simulate(base.with_power_state(out.state));
  out.runs = 1;
  if (!has_power_model(hw)) return out;
  while (out.runs < kMaxPowerStateRuns) {
    const PowerState next = solve_power_state(hw, mean_activity(out.results), out.state);
    if (next.close_to(out.state, kPowerStateTolerance)) {
      out.state.solved = true;
      out.state.watts = next.watts;
      out.state.clock = next.clock;
      return out;
    }
    out.state = next;
    out.results = simulate(base.with_power_state(out.state));
    ++out.runs;
  }
  return out;
}

PoweredSteps simulate_step_in_power_state(const StepGraph& graph, const CostModel& base, const EngineOptions& options) {
  return simulate_in_power_state(
      base, [&](const CostModel& cost) { return std::vector<StepResult>{Engine(graph, cost).run(options)}; }, &graph);
}

}  // namespace moesim
