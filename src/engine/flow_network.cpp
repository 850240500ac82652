// SPDX-License-Identifier: MIT
#include "engine/flow_network.hpp"

#include <algorithm>
#include <functional>

namespace moesim {
namespace {

// Each slot's resources, numbered slot * kPortsPerSlot + port.
constexpr int kScaleUpPort = 0;
constexpr int kNicPort = 1;
constexpr int kToHostPort = 2;
constexpr int kToDevicePort = 3;
constexpr int kPortsPerSlot = 4;

}  // namespace

void FlowNetwork::build(const SlotMap& slots) {
  slots_ = &slots;
  num_slots_ = slots.num_slots();
  tiers_.emplace(cost_, plan_.num_ranks(), static_cast<int32_t>(static_cast<size_t>(num_slots_) * kPortsPerSlot));
  tier_links_.clear();
}

void FlowNetwork::clear() {
  flows_.clear();
  free_flows_.clear();
  last_version_ = 0;
  sharing_.reset(static_cast<size_t>(num_slots_) * kPortsPerSlot + static_cast<size_t>(tiers_->num_resources()));
}

uint32_t FlowNetwork::new_flow() {
  uint32_t id;
  if (!free_flows_.empty()) {
    id = free_flows_.back();
    free_flows_.pop_back();
  } else {
    id = static_cast<uint32_t>(flows_.size());
    flows_.emplace_back();
  }
  // Reset, keeping the vectors' capacity for the next flow.
  Flow& f = flows_[id];
  f.active = false;
  f.fresh = false;
  f.remaining = 0;
  f.updated = 0;
  f.ports.clear();
  f.weights.clear();
  f.members.clear();
  return id;
}

uint32_t FlowNetwork::add_transfer(const std::vector<Member>& members, const CollectiveCost& c, bool uses_fabric,
                                   const Participants& who, bool direct) {
  const uint32_t id = new_flow();
  Flow& f = flows_[id];
  f.members.assign(members.begin(), members.end());
  const double up_s = c.up_bytes > 0 ? c.up_bytes / c.up_bandwidth : 0;
  const double out_s = c.out_bytes > 0 ? c.out_bytes / c.out_bandwidth : 0;
  f.remaining = up_s + out_s;
  if (uses_fabric && f.remaining > 0) {
    const bool scale_out = out_s > up_s;  // the phase that dominates decides the port shared
    const int port = scale_out ? kNicPort : kScaleUpPort;
    for (const auto& [slot, op] : f.members) {
      f.ports.push_back(slot * kPortsPerSlot + port);
      f.weights.push_back(1.0);
    }
    // Which switch instances the flow crosses, and its share of each per unit of bandwidth,
    // depend only on who takes part: computed once per group and pattern.
    const bool pair = who.peer >= 0;
    const int64_t n = pair ? 2 : plan_.group_size(who.kind);
    const int64_t first = pair ? std::min(who.rank, who.peer) : plan_.member(who.rank, who.kind, 0);
    const int64_t last = pair ? std::max(who.rank, who.peer) : plan_.member(who.rank, who.kind, n - 1);
    auto [it, inserted] = tier_links_.try_emplace(std::make_tuple(first, last, n, direct, scale_out));
    if (inserted) {
      const std::vector<int64_t> ranks = pair ? std::vector<int64_t>{first, last} : plan_.members(who.rank, who.kind);
      std::function<double(int64_t, int64_t)> participants;
      if (slots_->distinct()) {
        // Lockstep copies of this flow: every rank of its classes in the switch instance.
        participants = [&](int64_t first, int64_t span) {
          const int64_t last = std::min(first + span, plan_.num_ranks());
          double count = 0;
          for (const auto& [slot, op] : f.members) {
            count += static_cast<double>(slots_->class_ranks_in(slot, first, last));
          }
          return count;
        };
      }
      tiers_->add_links(ranks, direct, scale_out, 1.0, participants, it->second.first, it->second.second);
    }
    const double bandwidth = scale_out ? c.out_bandwidth : c.up_bandwidth;
    const auto& [resources, per_bandwidth] = it->second;
    f.ports.insert(f.ports.end(), resources.begin(), resources.end());
    for (double w : per_bandwidth) f.weights.push_back(w * bandwidth);
  }
  return id;
}

uint32_t FlowNetwork::add_copy(int32_t slot, uint32_t op_index, bool to_host, double bytes, double bandwidth) {
  const uint32_t id = new_flow();
  Flow& f = flows_[id];
  f.members.emplace_back(slot, op_index);
  f.remaining = bytes / bandwidth;
  if (f.remaining > 0) {
    f.ports.push_back(slot * kPortsPerSlot + (to_host ? kToHostPort : kToDevicePort));
    f.weights.push_back(1.0);
    if (cost_.hardware().device.host_memory.over_scale_up) {
      f.ports.push_back(slot * kPortsPerSlot + kScaleUpPort);
      f.weights.push_back(bandwidth / cost_.scale_up_bandwidth());
    }
  }
  return id;
}

// A flow joins or leaves the resources it crosses (max_min.hpp: only the flows connected to
// them can change rate); at the instant's reshare those get their work done so far at the old
// rate, then new rates.
void FlowNetwork::start(uint32_t id, Picoseconds t) {
  Flow& f = flows_[id];
  f.active = true;
  f.updated = t;
  f.fresh = true;  // no finish time yet, whatever its rate
  sharing_.add(id, f.ports, f.weights);
}

void FlowNetwork::end(uint32_t id) {
  flows_[id].active = false;
  sharing_.remove(id);
}

const std::vector<uint32_t>& FlowNetwork::reshare(Picoseconds t) {
  const std::vector<uint32_t>& component = sharing_.affected();
  old_rate_.resize(component.size());
  for (size_t i = 0; i < component.size(); ++i) {
    Flow& f = flows_[component[i]];
    old_rate_[i] = sharing_.rate(component[i]);
    f.remaining = std::max(0.0, f.remaining - old_rate_[i] * static_cast<double>(t - f.updated) * 1e-12);
    f.updated = t;
  }
  sharing_.share();
  changed_.clear();
  for (size_t i = 0; i < component.size(); ++i) {
    Flow& f = flows_[component[i]];
    if (sharing_.rate(component[i]) == old_rate_[i] && !f.fresh) continue;
    f.fresh = false;
    f.version = ++last_version_;  // unique across flows and their reuse: stale events never match
    changed_.push_back(component[i]);
  }
  return changed_;
}

}  // namespace moesim
