// SPDX-License-Identifier: MIT
// `--hardware H` on the commands that read a scenario (simulate, scenario info, validate, slice):
// the scenario run on another machine, such as a calibration scenario on the user's own box.
#pragma once

#include <string>

#include "core/json_input.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

inline Scenario load_scenario_with_hardware_flag(const InputText& scenario, const std::string& hardware) {
  if (hardware.empty()) return load_scenario(scenario);
  return load_scenario(scenario, read_input(hardware, "hardware", "--hardware"));
}

}  // namespace moesim
