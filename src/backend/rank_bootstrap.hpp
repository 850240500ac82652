// SPDX-License-Identifier: MIT
// One rank per process (`mpirun -np N moesim run|validate|calibrate`): where each process runs,
// which GPU it drives, which NCCL communicators it joins and how their unique ids reach it. Plain
// C++ over the Distributed interface (core/distributed.hpp): NCCL and CUDA stay behind callbacks,
// so all of it is tested with several MPI processes on a machine without GPUs
// (tests/backend/test_rank_bootstrap.cpp).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include "core/distributed.hpp"
#include "graph/step_graph.hpp"

namespace moesim::cuda {

// Where a process runs. Nodes are numbered in the order of their lowest rank; local ranks count
// the processes of a node in rank order.
struct ProcessPlacement {
  int rank = 0, size = 1;
  int node = 0, num_nodes = 1;
  int local_rank = 0, local_size = 1;
  std::vector<int> node_of;  // per rank of the job
};

// From every rank's node leader (Distributed::node_leader, in rank order): the placement of `rank`.
ProcessPlacement place_process(const std::vector<int>& node_leaders, int rank);
// The same over the job (collective: an all-gather of the node leaders).
ProcessPlacement place_process(Distributed& job);

// The GPU a process drives: its local rank when the node's processes see every GPU (one per
// process), GPU 0 when each process sees only its own (a launcher that sets CUDA_VISIBLE_DEVICES
// per rank). InputError naming `where` when the node runs more processes than it has GPUs.
int device_of(const ProcessPlacement& p, int visible_gpus, const std::string& where);

// Collective: fails on every process (InputError naming `where`) when two processes of one node
// drive the same GPU, named by `device_id` (its PCI bus id: the same physical GPU under any
// CUDA_VISIBLE_DEVICES). Processes pass their own GPU's id.
void check_distinct_devices(Distributed& job, const ProcessPlacement& p, const std::string& device_id,
                            const std::string& where);

// The communicators of a step graph's plan, one per instance, in one order every process derives
// alike: per communication queue whose group has more than one member, one per group instance
// (the queue's communicator, or for a collective issued on the compute queue its group's: see
// `communicator_of`); per pipeline link (channel, sender, receiver) one of two members, the
// sender first. Creating them in this order on every process cannot deadlock: each creation is
// collective over its members only, and the first instance not yet created anywhere has all its
// members waiting on it.
struct CommunicatorInstance {
  int communicator = -1;                     // index as communicator_of gives; -1 for a pipeline link
  std::tuple<int, int64_t, int64_t> link{};  // (channel, sender, receiver) of a pipeline link
  std::vector<int64_t> members;              // plan ranks, in communicator-rank order
};
std::vector<CommunicatorInstance> plan_communicators(const StepGraph& g);

// The communicator an op uses: its queue's, or, for a collective run on the compute queue (no
// comm/compute overlap), its group's (communication ops only).
int communicator_of(const Op& op);
// A pipeline send or receive's link: (channel, sender, receiver); sender < 0 when the peer is
// outside the group (the first or last stage: nothing to exchange).
std::tuple<int, int64_t, int64_t> pipeline_link(const StepGraph& g, int64_t rank, const Op& op);

// Collective: runs `check` on every process; when it throws an InputError on some of them, every
// process throws the lowest such rank's (file, path and message), so that all stop alike and rank
// 0 can report it. Other exceptions pass through on the process that threw them.
void agree_on_input(Distributed& job, const std::function<void()>& check);

// Collective: rank 0 makes `count` ids (NCCL: ncclGetUniqueId, as bytes) and every process gets
// them all, in order (one broadcast). `make_id` runs on rank 0 only; ids must all have one size.
std::vector<std::string> share_ids(Distributed& job, size_t count, const std::function<std::string()>& make_id);

// The process groups `moesim calibrate` measures collectives over in a job (nccl-tests' layout,
// one communicator per group). Within a node (`inter_node` false): for n = 2, 4, 8, ... up to the
// largest node's process count, a group of the first n local ranks on every node that has them
// (the nodes' groups run at once; a repeat's time is the slowest member's). Across nodes (a job
// on 2 or more nodes): for p = 1, 2, 4, ... up to the smallest node's process count, one group of
// the first p local ranks of every node, n = p x nodes. Groups list plan ranks in rank order.
struct CollectiveLayout {
  bool inter_node = false;
  int n = 0;               // ranks per group
  int nodes = 1;           // nodes a group spans
  int ranks_per_node = 0;  // of a group, on each node it spans
  std::vector<std::vector<int>> groups;
};
std::vector<CollectiveLayout> collective_layouts(const ProcessPlacement& p);

}  // namespace moesim::cuda
