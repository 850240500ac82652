// SPDX-License-Identifier: MIT
// The fuzz targets of tests/fuzz/, by name, shared by the libFuzzer binaries (fuzz_main.cpp) and
// the replay of tests/data/fuzz-regressions/ that every build runs (replay.cpp).
//
// A target takes any bytes and must return normally: the input loads (and, for "simulate", runs)
// or is refused with an InputError. Any other exception, a crash, a sanitizer report or a hang is
// a finding.
#pragma once

#include <string_view>
#include <vector>

namespace moesim::fuzz {

// model, hardware, scenario, calibration, graph, trace, simulate.
const std::vector<std::string_view>& target_names();

// Runs `bytes` through the target `name` (one of target_names(); anything else throws
// std::invalid_argument). Swallows InputError only.
void run_target(std::string_view name, std::string_view bytes);

}  // namespace moesim::fuzz
