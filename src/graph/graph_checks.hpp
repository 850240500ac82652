// SPDX-License-Identifier: MIT
// Invariants every step graph must satisfy; tests run them on every shipped model and many plans.
#pragma once

#include <string>
#include <vector>

#include "graph/step_graph.hpp"

namespace moesim {

// Each returns the violations found (empty: none), described for a test failure message.
// Dependencies and stream order form a DAG (checked with Boost.Graph's topological sort).
std::vector<std::string> check_acyclic(const Program& program);
// Every buffer is allocated once, moved between tiers only while allocated, and freed once; none
// is alive at the end of the step.
std::vector<std::string> check_memory_balance(const Program& program);
// Each memory effect on a buffer happens after the previous one: its op is ordered after the
// previous effect's op by queue order and dependencies (an allocator may otherwise release a
// buffer before it exists, and the engine would free it before it is allocated).
std::vector<std::string> check_memory_order(const Program& program);
// Point-to-point messages pair up: what a rank sends to a peer, the peer receives, in order and
// size (pipeline stages across programs, context-parallel state within one).
std::vector<std::string> check_p2p_matching(const StepGraph& graph);
// Members of a group issue the same collectives in the same order (group kinds whose members run
// different programs compare those programs).
std::vector<std::string> check_collective_order(const StepGraph& graph);
// All of the above, every program: what a graph read from a file or rewritten must pass before it
// is simulated.
std::vector<std::string> check_step_graph(const StepGraph& graph);

}  // namespace moesim
