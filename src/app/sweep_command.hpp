// SPDX-License-Identifier: MIT
// `moesim sweep SCENARIO`: the strategy search over the scenario's sweep axes (search/sweep.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace moesim {

struct SweepCliOptions {
  std::string scenario;
  bool json = false;
  std::string csv;
  int64_t top = 20;
  int64_t threads = 0;  // 0: the hardware's thread count
  int64_t max_listed = 20;
  bool all_ranks = false;  // simulate every rank (EngineOptions::distinct_ranks off)
  int64_t explain = -1;    // >= 0: print this configuration's full step report instead of sweeping
};

CLI::App* add_sweep_command(CLI::App& app, SweepCliOptions& options);
// Runs the sweep and prints on rank 0. Returns the exit code; throws InputError for bad input.
int run_sweep_command(const SweepCliOptions& options);

}  // namespace moesim
