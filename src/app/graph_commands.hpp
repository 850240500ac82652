// SPDX-License-Identifier: MIT
// `moesim graph stats|export|import`: the op graph of a scenario's training step.
#pragma once

#include <string>

#include "graph/graph_stats.hpp"

namespace moesim {

std::string graph_stats_text(const StepGraph& graph, const GraphStats& stats, double build_s);
std::string graph_stats_json(const StepGraph& graph, const GraphStats& stats, double build_s);

}  // namespace moesim
