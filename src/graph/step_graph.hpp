// SPDX-License-Identifier: MIT
// StepGraph: the per-rank programs of one training step of a scenario - forward and backward of
// every micro-batch in the pipeline schedule, FSDP2 gathers and reduce-scatters, expert
// all-to-alls, recompute and swap, and the optimizer - with the plan that maps ranks to programs
// and the routing sampler that sizes each rank's expert traffic.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/program.hpp"
#include "graph/routing.hpp"
#include "plan/parallel_plan.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

struct StepGraph {
  std::string scenario;
  // The file it came from (the scenario, or an exported graph), named by errors the engine finds
  // in it (a step beyond its clock); not written to exported graphs.
  std::string source;
  ParallelPlan plan{MeshShape{}};
  std::vector<Program> programs;  // one per pipeline stage
  std::optional<RoutingSampler> routing;
  int64_t num_micro_batches = 0;     // per data-parallel rank
  int64_t tokens_per_micro_batch = 0;  // T on one rank (micro_batch x sequence / cp)
  int64_t tokens_per_step = 0;       // global
  int64_t seq_len = 0;
  // The host's time on each op: host_op_issue_s + its kernels x host_kernel_issue_s (scenario
  // host.op_issue, host.kernel_issue); the engine issues op i once the host spent it on ops 0..i-1.
  double host_op_issue_s = 0;
  double host_kernel_issue_s = 0;
  // The host waits for each forward or recomputed router op to end before issuing the ops after
  // it in program order (scenario host.waits_for_routing, off under capacity padding).
  bool host_waits_for_routing = false;
  double allocator_fragmentation = 0;  // an allocator's loss beyond best-fit placement, a fraction of the slab (scenario memory)
  ExpertDispatch expert_dispatch = ExpertDispatch::direct;  // how expert all-to-alls cross scale-up domains

  // Tokens each rank routes to its EP group in a micro-batch (ParallelPlan::routed_tokens).
  int64_t routed_tokens_per_micro_batch() const { return plan.routed_tokens(tokens_per_micro_batch); }
};

StepGraph build_step_graph(const Scenario& scenario);
// EP ranks per scale-up domain when the EP group (that of rank 0) fills domains of `domain_size`
// in equal consecutive blocks, the units of node-limited routing; 0 when it does not.
int64_t ep_ranks_per_node(const ParallelPlan& plan, int64_t domain_size);
// The same for the scenario's hardware, checked against routing.nodes_per_token (InputError at
// that path when the group cannot be split into nodes or M nodes hold fewer than top_k experts).
int64_t routing_ranks_per_node(const Scenario& scenario, const ParallelPlan& plan);

// Each pipeline stage's persistent state per rank (weights, master weights, gradients, optimizer
// states by ZeRO stage; the runtime and communicator buffers are not included): what
// build_step_graph puts in Program::persistent, without building the programs. Without adapters,
// LoRA adapters are left out, which needs no layer tape (a cheap lower bound for sweeps).
std::vector<PersistentMemory> persistent_state(const Scenario& scenario, const ParallelPlan& plan,
                                               bool with_adapters = true);

}  // namespace moesim
