// SPDX-License-Identifier: MIT
#include "cost/power_state.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace moesim {

PowerClass power_class(OpKind kind) {
  switch (kind) {
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::grouped_gemm:
    case OpKind::router:
    case OpKind::cce_loss:
    case OpKind::indexer_score: return PowerClass::gemm;
    case OpKind::flash_attention:
    case OpKind::sparse_attention:
    case OpKind::dsa_indexer:
    case OpKind::kda:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction: return PowerClass::attention;
    default: return PowerClass::memory;
  }
}

bool PowerState::close_to(const PowerState& o, double tolerance) const {
  for (size_t c = 0; c < kNumPowerClasses; ++c) {
    if (std::abs(rate[c] / o.rate[c] - 1) > tolerance) return false;
  }
  return true;
}

PowerState fixed_power_state(const HardwareSpec& hw) {
  PowerState s;
  if (!hw.device.power) return s;
  s.clock = hw.device.power->compute_scale();
  s.rate = {s.clock, s.clock, 1.0};
  return s;
}

bool has_power_model(const HardwareSpec& hw) { return hw.device.power && hw.device.power->dynamic_power; }

namespace {

double dynamic_of(const PowerSpec& p, PowerClass c) {
  const DynamicPowerSpec& d = *p.dynamic_power;
  switch (c) {
    case PowerClass::gemm: return d.gemm.value;
    case PowerClass::attention: return d.attention.value;
    case PowerClass::memory: return d.memory.value;
  }
  return d.gemm.value;
}

// The clock at which class c alone, back to back, draws `watts` (1 if it draws less at the top).
double clock_at(const PowerSpec& p, PowerClass c, double watts) {
  const double x = std::pow((watts - p.static_power.value) / dynamic_of(p, c), 1 / p.clock_exponent);
  return std::min(x, 1.0);
}

}  // namespace

double reference_clock(const PowerSpec& p, PowerClass c) {
  if (c == PowerClass::memory) return 1;
  return clock_at(p, c, p.efficiency_limit.value);
}

namespace {

// Energy above the limit over a step at clock x, each class busy for time(c, x): increasing in x
// for the time functions used here (compute slows as 1 / x or keeps its time), so its root is
// found by bisection; the top clock where the step draws no more than the limit there.
template <class Time>
PowerState settle(const PowerSpec& p, const StepActivity& activity, Time time) {
  const double limit = p.limit.value;
  auto power = [&](PowerClass c, double x) { return p.static_power.value + dynamic_of(p, c) * std::pow(x, p.clock_exponent); };
  auto excess = [&](double x) {
    double j = activity.idle * (p.idle_power->value - limit);
    for (size_t c = 0; c < kNumPowerClasses; ++c) {
      const auto cls = static_cast<PowerClass>(c);
      j += time(cls, x) * (power(cls, x) - limit);
    }
    return j;
  };
  double x = 1;
  if (excess(1) > 0) {
    double lo = 1e-3, hi = 1;
    for (int i = 0; i < 60; ++i) {
      const double mid = 0.5 * (lo + hi);
      (excess(mid) > 0 ? hi : lo) = mid;
    }
    x = lo;
  }
  PowerState s;
  s.solved = true;
  s.clock = x;
  double total = activity.idle, energy = activity.idle * p.idle_power->value;
  for (size_t c = 0; c < kNumPowerClasses; ++c) {
    const auto cls = static_cast<PowerClass>(c);
    s.rate[c] = cls == PowerClass::memory ? 1.0 : x / reference_clock(p, cls);
    total += time(cls, x);
    energy += time(cls, x) * power(cls, x);
  }
  s.watts = total > 0 ? energy / total : p.idle_power->value;
  return s;
}

}  // namespace

PowerState solve_power_state(const HardwareSpec& hw, const StepActivity& activity, const PowerState& ran_at) {
  const PowerSpec& p = *hw.device.power;
  // Each compute class's time at its reference clock (the simulated time times the rate it ran
  // at), and at clock x that time x_ref / x.
  return settle(p, activity, [&](PowerClass c, double x) {
    const double t = activity.busy[static_cast<size_t>(c)];
    if (c == PowerClass::memory) return t;
    return t * ran_at.rate_of(c) * reference_clock(p, c) / x;
  });
}

PowerState measured_power_state(const HardwareSpec& hw, const StepActivity& measured) {
  return settle(*hw.device.power, measured, [&](PowerClass c, double) { return measured.busy[static_cast<size_t>(c)]; });
}

std::string describe(const PowerState& s) {
  char buf[160];
  if (!s.solved) {
    std::snprintf(buf, sizeof buf, "compute at %.3f of the measured rate (the power limit)", s.clock);
  } else {
    std::snprintf(buf, sizeof buf, "clock %.3f of top, %.0f W: GEMMs x%.3f, attention x%.3f of the measured rate",
                  s.clock, s.watts, s.rate_of(PowerClass::gemm), s.rate_of(PowerClass::attention));
  }
  return buf;
}

void to_json(nlohmann::json& j, const PowerState& s) {
  j = {{"solved", s.solved},
       {"clock", s.clock},
       {"watts", s.watts},
       {"rate", {{"gemm", s.rate_of(PowerClass::gemm)}, {"attention", s.rate_of(PowerClass::attention)}}}};
}

}  // namespace moesim
