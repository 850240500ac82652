// SPDX-License-Identifier: MIT
// `moesim hardware info`, `moesim scenario info` and `moesim describe`: what an input file says,
// after it has been read and checked.
#pragma once

#include <string>

#include "hardware/hardware_spec.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

std::string hardware_info_text(const std::string& file, const HardwareSpec& hw);
std::string hardware_info_json(const std::string& file, const HardwareSpec& hw);
std::string scenario_info_text(const Scenario& s);
std::string scenario_info_json(const Scenario& s);

// The input reference; kind is "model", "hardware", "scenario" or "" for all three.
std::string describe_text(const std::string& kind);
std::string describe_markdown(const std::string& kind);

}  // namespace moesim
