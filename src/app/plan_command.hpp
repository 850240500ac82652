// SPDX-License-Identifier: MIT
// `moesim plan devices|fit SCENARIO`: capacity planning (search/capacity.hpp).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace moesim {

struct PlanCliOptions {
  std::string scenario;
  bool json = false;
  // devices
  double tokens = 0;
  double days = 0;
  int64_t max_devices = 0;
  bool fixed_batch = false;
  // fit
  std::string vary = "sequence_length";
  int64_t granularity = 0;
  int64_t max_value = 0;
  bool all_ranks = false;
};

struct PlanCommands {
  CLI::App* devices = nullptr;
  CLI::App* fit = nullptr;
};

PlanCommands add_plan_command(CLI::App& app, PlanCliOptions& options);
// Runs whichever of the two was parsed and prints its report.
void run_plan_command(const PlanCommands& commands, const PlanCliOptions& options);

}  // namespace moesim
