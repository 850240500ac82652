// SPDX-License-Identifier: MIT
// The transfers in flight as flows over shared resources, each of capacity 1 (its full
// bandwidth): every simulated slot's scale-up port, its NIC and its link to host memory in each
// direction, and the switch instances (switch_tiers.hpp). Rates are weighted max-min fair
// (max_min.hpp); the network keeps how much work each flow has left at its current rate and
// tells, whenever a flow starts or ends, which flows now finish at another time. Scheduling
// those ends is the engine's.
//
// A flow's work is in seconds at full rate: a collective's scale-up phase plus its scale-out
// phase (CostModel::collective), a copy's bytes over its bandwidth. A collective's flow occupies
// the port of the phase that dominates on every member with weight 1, and each switch instance
// its traffic crosses with the weight switch_tiers.hpp derives; a copy occupies its slot's host
// link in its direction with weight 1 and, when host memory sits behind the scale-up fabric, the
// scale-up port with weight copy bandwidth / port bandwidth.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <tuple>
#include <utility>
#include <vector>

#include "cost/cost_model.hpp"
#include "engine/max_min.hpp"
#include "engine/slot_map.hpp"
#include "engine/switch_tiers.hpp"
#include "graph/timeline.hpp"

namespace moesim {

class FlowNetwork {
 public:
  using Member = std::pair<int32_t, uint32_t>;  // (slot, op): an op that ends when the flow does

  // Who takes part in a transfer: the whole group of `kind` around `rank` (also in distinct mode,
  // where the flow's members are one slot per class), or the pair `rank`, `peer` of a send.
  struct Participants {
    int64_t rank;
    GroupKind kind;
    int64_t peer;  // -1: a collective
  };

  // Keeps references to the plan and the cost model, which must outlive the network.
  FlowNetwork(const ParallelPlan& plan, const CostModel& cost) : plan_(plan), cost_(cost) {}

  // The resources of `slots`' ports and of the switch instances, numbered after them; forgets
  // the switch crossings found for other slots. Keeps a reference to `slots`.
  void build(const SlotMap& slots);
  // Forgets every flow: a new run on the same slots.
  void clear();

  // A transfer among `members` of cost `c` (its latency is the caller's). With `uses_fabric`, it
  // occupies their ports and the switch instances the participants' traffic crosses; `direct`:
  // all-to-all or point-to-point traffic (else ring-like; see switch_tiers.hpp).
  uint32_t add_transfer(const std::vector<Member>& members, const CollectiveCost& c, bool uses_fabric,
                        const Participants& who, bool direct);
  // A copy of `bytes` at `bandwidth` for op `op_index` of `slot`, to host memory or back.
  uint32_t add_copy(int32_t slot, uint32_t op_index, bool to_host, double bytes, double bandwidth);

  // Flow `id` starts at `t`, or ends. Rates change only at reshare(t): call it once the
  // instant's starts and ends are all in (no time passes within an instant, so the rates in
  // between would carry no work).
  void start(uint32_t id, Picoseconds t);
  void end(uint32_t id);
  // Whether flows started or ended since the last reshare.
  bool pending() const { return sharing_.pending(); }
  // New rates after the starts and ends since the last call, all at `t`: the flows whose rate
  // changed (every flow started since and still active among them), each with a new version; the
  // others' finish times stay valid. Valid until the next call.
  const std::vector<uint32_t>& reshare(Picoseconds t);
  // An ended flow's id may be reused by the next add_*.
  void release(uint32_t id) { free_flows_.push_back(id); }

  // Whether a finish time given for `version` of flow `id` still holds.
  bool current(uint32_t id, uint64_t version) const { return flows_[id].active && flows_[id].version == version; }
  uint64_t version(uint32_t id) const { return flows_[id].version; }
  // Seconds until flow `id` ends at its current rate.
  double seconds_left(uint32_t id) const { return flows_[id].remaining / sharing_.rate(id); }
  const std::vector<Member>& members(uint32_t id) const { return flows_[id].members; }

  // Verifies the last sharing against the definition of max-min (MaxMinSharing::check).
  void check(int64_t& checks, int64_t& violations) const { sharing_.check(checks, violations); }

 private:
  struct Flow {
    bool active = false;
    bool fresh = false;    // started since the last reshare
    double remaining = 0;  // seconds at full rate (as of `updated`)
    Picoseconds updated = 0;
    uint64_t version = 0;
    std::vector<int32_t> ports;
    std::vector<double> weights;  // per port: the share of it the flow takes at full rate
    std::vector<Member> members;
  };

  uint32_t new_flow();

  const ParallelPlan& plan_;
  const CostModel& cost_;
  const SlotMap* slots_ = nullptr;
  int64_t num_slots_ = 0;
  std::optional<SwitchTiers> tiers_;  // switch instances, numbered after the slots' ports
  // Switch instances and weights per unit of bandwidth of a transfer, by (first rank, last rank,
  // members, direct, scale-out): groups are arithmetic progressions of ranks, so the first, the
  // last and the count name one (and, in distinct mode, the classes taking part).
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, std::pair<std::vector<int32_t>, std::vector<double>>>
      tier_links_;
  std::vector<Flow> flows_;
  std::vector<uint32_t> free_flows_;
  uint64_t last_version_ = 0;
  MaxMinSharing sharing_;           // rates of the active flows over ports and switch instances
  std::vector<double> old_rate_;    // scratch of reshare
  std::vector<uint32_t> changed_;   // reshare's answer
};

}  // namespace moesim
