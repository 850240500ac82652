// SPDX-License-Identifier: MIT
// The SM clock a step runs at under its power limit, from what the step keeps the GPU doing.
//
// A GPU at its power limit sets one SM clock for whatever runs: the clock at which the board's
// power, averaged over its controller's window (milliseconds: many kernels, but far shorter than a
// pipeline bubble), meets the limit. Kernel classes draw different power at a clock - tensor-core
// GEMMs the most, attention less, memory-bound kernels and an idle GPU little - so one kernel runs
// at different rates in different steps: a GEMM faster between memory-bound kernels or idle gaps
// than back to back, attention slower beside GEMMs than alone (docs/hardware-efficiency.md, "The
// step's power state").
//
// The model (PowerSpec with `dynamic_power`): at relative clock x (of the part's top clock) a busy
// class c draws static_power + dynamic_power[c] x^clock_exponent, an idle moment idle_power. A
// compute-bound class's efficiencies (curves and calibration tables) were measured back to back at
// efficiency_limit, so at the clock x_ref(c) where static + dynamic[c] x^e = efficiency_limit (the
// top clock, 1, if the class draws less there); in a step at clock x its kernels run at x / x_ref(c)
// of their measured rate. Memory-bound kernels keep their time (HBM has its own clock) but draw
// power at the step's clock. The step's clock x solves
//     sum_c t_c(x) (P_c(x) - limit) + t_idle (idle_power - limit) = 0,   t_c(x) = t_c,ref x_ref(c) / x
// for the compute classes (t_mem fixed), or is 1 where the step draws no more than the limit there.
// Pipeline bubbles are left out of the average: they outlast the controller's window, so the busy
// stretches around them run at their own power.
//
// Without `dynamic_power` the part's compute-bound rates are PowerSpec::compute_scale of the
// measured ones, whatever the step does (the limit alone, as before this model).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "graph/op.hpp"
#include "hardware/hardware_spec.hpp"

namespace moesim {

// The kernel classes of the power model.
enum class PowerClass : uint8_t { gemm, attention, memory };
inline constexpr size_t kNumPowerClasses = 3;

// The class an op's kernels belong to: tensor-core matmuls (dense and grouped GEMMs, the router,
// the CCE loss, the DSA indexer's score), attention cores (flash, sparse, KDA), everything else.
PowerClass power_class(OpKind kind);

// What a step's compute stream did, in seconds, at the rates of the state it was simulated in.
struct StepActivity {
  std::array<double, kNumPowerClasses> busy{};  // by PowerClass
  double idle = 0;  // no kernel: waiting for the host, a collective, a copy (bubbles left out)
};

// The rates a step's kernels run at, relative to the rates the hardware file's efficiencies (and
// calibration) give: one factor per class, the memory class's always 1.
struct PowerState {
  double clock = 1;  // relative to the top clock; without dynamic_power, PowerSpec::compute_scale
  std::array<double, kNumPowerClasses> rate{1, 1, 1};
  double watts = 0;  // the step's mean board power at that clock (0 without dynamic_power)
  bool solved = false;  // true: from a step's activity; false: the file's fixed scale

  double rate_of(PowerClass c) const { return rate[static_cast<size_t>(c)]; }
  // Whether `o`'s rates are within `tolerance` (relative) of this state's.
  bool close_to(const PowerState& o, double tolerance) const;
};

// The fixed state of a hardware file: every compute class at PowerSpec::compute_scale (1 without
// a power block). What a cost model starts from.
PowerState fixed_power_state(const HardwareSpec& hw);

// Whether the file carries what solve_power_state needs (device.power.dynamic_power).
bool has_power_model(const HardwareSpec& hw);

// The clock of a class's efficiencies: x_ref(c) above (1 for the memory class).
double reference_clock(const PowerSpec& p, PowerClass c);

// The state of a step that did `activity` while simulated in state `ran_at`. Requires
// has_power_model(hw).
PowerState solve_power_state(const HardwareSpec& hw, const StepActivity& activity, const PowerState& ran_at);

// The state a measured step ran in (a profiler trace): the clock at which the step's measured
// activity draws the limit, its times taken as they were. Requires has_power_model(hw).
PowerState measured_power_state(const HardwareSpec& hw, const StepActivity& measured);

// "clock 0.93 of top, 700 W: GEMM x1.21, attention x1.01" for reports.
std::string describe(const PowerState& s);

// {"solved", "clock", "watts", "rate": {"gemm", "attention"}}: the state in JSON reports.
void to_json(nlohmann::json& j, const PowerState& s);

}  // namespace moesim
