// SPDX-License-Identifier: MIT
// Totals of a step graph over all ranks: ops, FLOPs, bytes per op kind and per collective.
#pragma once

#include <cstdint>
#include <map>

#include "graph/step_graph.hpp"

namespace moesim {

struct KindStats {
  int64_t count = 0;     // over all ranks
  double flops = 0;      // over all ranks
  double comm_bytes = 0; // collectives and p2p: nccl-tests size summed over ranks; copies: bytes copied
};

struct GraphStats {
  int64_t num_ranks = 0;
  int64_t num_programs = 0;
  int64_t num_program_ops = 0;    // ops stored (shared by the ranks of a program)
  int64_t num_ops = 0;            // ops run in a step, over all ranks
  int64_t num_micro_batches = 0;
  int64_t tokens_per_step = 0;
  double flops_per_step = 0;        // all work, recompute included, over all ranks
  double model_flops_per_step = 0;  // matmuls and attention cores of forward and backward
  double all_to_all_remote_bytes = 0;  // what leaves each rank (expected under the routing distribution)
  std::map<OpKind, KindStats> by_kind;
};

// `routing`: the sampler expert traffic is drawn from, when not the graph's own (a sweep over
// routing reuses one graph).
GraphStats compute_stats(const StepGraph& graph, const RoutingSampler* routing = nullptr);

}  // namespace moesim
