// SPDX-License-Identifier: MIT
// A closed-form lower bound on a rank's peak HBM, to prune configurations that cannot fit
// before building their graph.
//
// The engine starts every rank at its program's persistent state (Program::persistent: weights,
// master weights, gradients, optimizer states, sharded by the plan's ZeRO stage) and only adds and
// frees on top of it, so its peak is at least that state. The bound is that state as the graph
// builder computes it (persistent_state in graph/step_graph.hpp, one owner), stage by stage,
// without LoRA adapters (cheap, and below the real state), plus the runtime's reserve
// (memory.runtime_reserved; the communicators' buffers, which depend on the ops, are left out).
// The bound is the largest stage's, which no rank of that stage can stay under. Activations,
// gathered parameters and buffers are left out: they only add.
#pragma once

#include <vector>

#include "scenario/scenario_spec.hpp"

namespace moesim {

// Bytes per rank of each pipeline stage's persistent state, a lower bound on what the graph
// builder computes (Program::persistent.total(); equal to it but for the communicator buffers
// when nothing is LoRA, up to rounding of the sums).
std::vector<double> persistent_lower_bound_per_stage(const Scenario& scenario);
// The largest stage's: no configuration whose bound exceeds the device's HBM can fit.
double persistent_lower_bound_bytes(const Scenario& scenario);

}  // namespace moesim
