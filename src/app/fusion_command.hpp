// SPDX-License-Identifier: MIT
// `moesim fusion [SCENARIO]`: kernel fusions the step graph could use, found by rule, each
// re-simulated alone, then a greedy cumulative order (analysis/fusion.hpp, docs/fusion.md).
#pragma once

#include <cstdint>
#include <string>

namespace CLI {
class App;
}

namespace moesim {

struct FusionCliOptions {
  std::string scenario;         // empty: the embedded default
  bool json = false;
  int64_t top = 10;             // candidates listed and taken into the greedy order
  bool rank_order = false;      // cumulative in the order of the gains alone (no greedy search)
  bool distinct_ranks = false;  // EngineOptions::distinct_ranks
  int64_t apply = 0;            // write the graph with the first N of the cumulative order fused
  std::string output;           // ... to this file (export_graph_json)
};

CLI::App* add_fusion_command(CLI::App& app, FusionCliOptions& options);
// Runs the analysis; returns the report (text or JSON) for main to print. Writes --output when
// --apply is given. Throws InputError for bad input.
std::string run_fusion_command(const FusionCliOptions& options);

}  // namespace moesim
