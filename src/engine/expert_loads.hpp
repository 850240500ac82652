// SPDX-License-Identifier: MIT
// What a routing draw makes of the MoE layers on each simulated slot: the rows its experts
// process (all of them, or under local-first dispatch the part its rank routed itself and the
// part its peers sent), and the all-to-all traffic of its EP group, which ends with the group's
// busiest member. The graph's routed ops hold the expected sizes; the engine scales them by these.
//
// Loads are drawn once per (layer, micro-batch, EP group) from the RoutingSampler (routing.hpp)
// and kept for the run: a dispatch, its combine and their backward move the same tokens.
#pragma once

#include <cstdint>
#include <tuple>
#include <unordered_map>
#include <utility>
#include <vector>

#include "cost/cost_model.hpp"
#include "engine/slot_map.hpp"
#include "graph/step_graph.hpp"

namespace moesim {

class ExpertLoads {
 public:
  // Keeps references to the graph and the slots, which must outlive it; `ep`: where an EP group
  // sits on the fabric.
  ExpertLoads(const StepGraph& graph, const SlotMap& slots, const GroupPlacement& ep)
      : g_(graph), slots_(slots), ep_(ep) {}

  // A new run drawing from `routing` (null: no sampled routing, every op at its built size) at
  // sampled step `step`; forgets the previous run's draws and load balance.
  void reset(const RoutingSampler* routing, int64_t step);

  // Under hierarchical dispatch, the share of an expert all-to-all that crosses the scale-out
  // network (CostModel::hierarchical_out_fraction); < 0: direct dispatch.
  double ep_out_fraction() const { return ep_out_fraction_; }

  // A routed GEMM's sampled rows over the rows it was built with (1 for every other op).
  double rows_scale(int32_t slot, const Op& op);

  // The bytes of communication op `op` among the slots `met` over a group placed as `gp`, in
  // nccl-tests' convention: op.comm_bytes, or for an expert all-to-all-v the busiest member's.
  double comm_bytes(const Op& op, const std::vector<std::pair<int32_t, uint32_t>>& met, const GroupPlacement& gp);

  // The busiest EP member's rows over the balanced T k, averaged over the draws of this run
  // (StepResult::ep_load_imbalance); 0 without any.
  double load_imbalance() const {
    return ep_load_ratio_count_ > 0 ? ep_load_ratio_sum_ / static_cast<double>(ep_load_ratio_count_) : 0;
  }

 private:
  // Routing of one MoE layer's micro-batch over one EP group.
  struct RoutingSample {
    std::vector<double> received_rows;  // per member: assignments its experts process
    std::vector<double> kept_rows;      // per member: of those, the ones it routed itself
    double worst_wire_assignments = 0;  // the largest over members of max(sent, received) off the rank
  };
  // One simulated slot's MoE work in one layer and micro-batch (see load_of).
  struct SlotLoad {
    double rows = 0;              // assignments its experts process
    double local_rows = 0;        // of those, the ones its rank routed itself (local-first's local part)
    double remote_rows = 0;       // and the ones its peers sent
    double wire_assignments = 0;  // its EP group's busiest member's all-to-all traffic
  };
  using Key = std::tuple<int32_t, int32_t, int64_t>;  // (layer, micro-batch, EP group id or slot)
  // Looked up per MoE op: hashed, not ordered (never iterated).
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = static_cast<uint64_t>(static_cast<uint32_t>(std::get<0>(k)));
      h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint32_t>(std::get<1>(k));
      h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(std::get<2>(k));
      return static_cast<size_t>(h ^ (h >> 29));
    }
  };

  // Where a slot's ranks sit in their EP groups, found once per run: the groups in the order
  // its ranks first reach them (the order the draws were always made in), and per rank its
  // group's index in that list and its rank in the group. A class of 16,384 ranks would
  // otherwise recompute every member's coordinates for every layer and micro-batch.
  struct SlotMembers {
    bool known = false;
    std::vector<int64_t> groups;                        // EP group ids
    std::vector<std::pair<uint32_t, uint32_t>> ranks;   // (index into groups, EP group rank)
  };

  const RoutingSample& group_routing(int32_t layer, int32_t micro, int64_t group_id);
  const SlotMembers& members_of(int32_t slot);
  const SlotLoad& load_of(int32_t layer, int32_t micro, int32_t slot);

  const StepGraph& g_;
  const SlotMap& slots_;
  GroupPlacement ep_;
  const RoutingSampler* routing_ = nullptr;
  int64_t step_ = 0;
  double ep_out_fraction_ = -1;
  // Sum and count of the busiest EP member's rows over T k, per sampled (layer, micro, group).
  double ep_load_ratio_sum_ = 0;
  int64_t ep_load_ratio_count_ = 0;
  std::unordered_map<Key, RoutingSample, KeyHash> routing_samples_;  // by (layer, micro, EP group id)
  std::unordered_map<Key, SlotLoad, KeyHash> slot_loads_;            // by (layer, micro, slot)
  std::vector<SlotMembers> slot_members_;                            // by slot, filled as asked
  std::vector<const RoutingSample*> group_samples_;                  // load_of's scratch, per group
};

}  // namespace moesim
