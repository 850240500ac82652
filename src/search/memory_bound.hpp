// SPDX-License-Identifier: MIT
// A closed-form lower bound on a rank's peak HBM, to prune configurations that cannot fit
// before building their graph.
//
// The engine starts every rank at its program's persistent state (Program::persistent: sharded
// weights, master weights, gradients, optimizer states) and only adds and frees on top of it, so
// its peak is at least that state. The bound recomputes the state from the model's parameter
// counts (model/accounting) with the plan's sharding, as the graph builder does, stage by stage:
//   per FSDP unit:  base = non_expert / (tp * fsdp) + expert / (ep * tp * edp)    [parameters per rank]
//   pretrain / full fine-tune (everything trainable):  base * (master + grad + states * optimizer) bytes
//   LoRA:  base * param bytes  (the adapters' own state is left out, so this is a lower bound)
// with fsdp = shard x cp, edp = shard x cp / ep, the embedding on the first stage (not split by
// TP) and the head on the last, plus the runtime's reserve (memory.runtime_reserved; the
// communicators' buffers, which depend on the ops, are left out). The bound is the largest
// stage's, which no rank of that stage can stay under. Activations, gathered parameters and
// buffers are left out: they only add.
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
