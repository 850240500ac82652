// SPDX-License-Identifier: MIT
#include "engine/expert_loads.hpp"

#include <algorithm>

namespace moesim {

void ExpertLoads::reset(const RoutingSampler* routing, int64_t step) {
  routing_ = routing;
  step_ = step;
  ep_out_fraction_ = routing_ && g_.expert_dispatch == ExpertDispatch::hierarchical && ep_.num_domains > 1
                         ? CostModel::hierarchical_out_fraction(routing_->num_experts(), routing_->top_k(), ep_,
                                                                routing_->limit_units(),
                                                                routing_->limited() ? routing_->limit_per_token() : 0)
                         : -1;
  ep_load_ratio_sum_ = 0;
  ep_load_ratio_count_ = 0;
  routing_samples_.clear();
  slot_loads_.clear();
  slot_members_.clear();  // the slots may be others in this run
}

// The sampled routing of one EP group (its members' loads) in one layer and micro-batch.
// Wire traffic is counted in assignments (one token copy per expert), or under device-limited
// routing with direct dispatch in token copies (one per destination rank, routing.hpp); both
// weigh the same bytes. With a capacity (routing.hpp), a member's experts process
// processed_rows of what arrives; dropped assignments are not sent: member i's arrivals and
// kept ones shrink by its processed fraction f_i, its sends by the group's mean fraction (each
// sender spreads its assignments like the others, so in expectation it loses the group's share).
// Padding sends fixed buffers: each member gets experts_per_rank * C rows, (ep-1)/ep of them
// from other members, whatever the loads.
const ExpertLoads::RoutingSample& ExpertLoads::group_routing(int32_t layer, int32_t micro, int64_t gid) {
  auto [it, inserted] = routing_samples_.try_emplace({layer, micro, gid});
  if (!inserted) return it->second;
  const auto n = static_cast<size_t>(g_.plan.group_size(GroupKind::ep));
  RoutingSample& s = it->second;
  const int64_t tokens = g_.routed_tokens_per_micro_batch();
  std::vector<int64_t> received(n), kept(n);
  std::vector<int64_t> copies, kept_copies;  // device-limited direct dispatch: what crosses the wire
  double sent = static_cast<double>(tokens * routing_->top_k());
  if (routing_->dedups_devices() && ep_out_fraction_ < 0) {
    copies.resize(n);
    kept_copies.resize(n);
    routing_->sample_group_copies(step_, layer, micro, gid, tokens, copies, kept_copies, received, kept);
    sent = static_cast<double>(tokens * routing_->units_reached());
  } else {
    routing_->sample_group_loads(step_, layer, micro, gid, tokens, received, kept);
  }
  s.received_rows.resize(n);
  s.kept_rows.resize(n);
  const int64_t capacity = routing_->expert_capacity(tokens);
  if (capacity < 0) {
    for (size_t i = 0; i < n; ++i) {
      s.received_rows[i] = static_cast<double>(received[i]);
      s.kept_rows[i] = static_cast<double>(kept[i]);
      const double in = static_cast<double>(copies.empty() ? received[i] : copies[i]);
      const double own = static_cast<double>(copies.empty() ? kept[i] : kept_copies[i]);
      s.worst_wire_assignments = std::max(s.worst_wire_assignments, std::max(sent, in) - own);
    }
  } else if (routing_->spec().capacity_policy == CapacityPolicy::pad) {
    const double rows = static_cast<double>(routing_->experts_per_rank() * capacity);
    for (size_t i = 0; i < n; ++i) {
      s.received_rows[i] = rows;
      s.kept_rows[i] = rows / static_cast<double>(n);  // a fixed buffer per peer, its own included
    }
    s.worst_wire_assignments = rows * static_cast<double>(n - 1) / static_cast<double>(n);
  } else {
    std::vector<double> kept_fraction(n);
    double processed_sum = 0, received_sum = 0;
    for (size_t i = 0; i < n; ++i) {
      const int64_t processed = routing_->processed_rows(step_, layer, micro, gid, static_cast<int64_t>(i), tokens, received[i]);
      s.received_rows[i] = static_cast<double>(processed);
      kept_fraction[i] = received[i] > 0 ? static_cast<double>(processed) / static_cast<double>(received[i]) : 1.0;
      s.kept_rows[i] = static_cast<double>(kept[i]) * kept_fraction[i];
      processed_sum += static_cast<double>(processed);
      received_sum += static_cast<double>(received[i]);
    }
    const double sent_fraction = received_sum > 0 ? processed_sum / received_sum : 1.0;
    for (size_t i = 0; i < n; ++i) {
      const double in = static_cast<double>(copies.empty() ? received[i] : copies[i]);
      const double own = static_cast<double>(copies.empty() ? kept[i] : kept_copies[i]) * kept_fraction[i];
      const double wire = std::max(sent * sent_fraction - own, in * kept_fraction[i] - own);
      s.worst_wire_assignments = std::max(s.worst_wire_assignments, wire);
    }
  }
  // The step report's load balance: the busiest member's rows over the balanced T k.
  double busiest = 0;
  for (double rows : s.received_rows) busiest = std::max(busiest, rows);
  ep_load_ratio_sum_ += busiest / static_cast<double>(tokens * routing_->top_k());
  ++ep_load_ratio_count_;
  return s;
}

// What a slot's MoE layer processes and sends: its rank's own rows, and its EP group's worst
// wire traffic (an all-to-all ends with its busiest member). A class stands for all its members,
// so it takes the largest of each over them: exact when their loads are equal, and otherwise
// the slowest member's loads (a bound; docs/performance.md measures how close).
const ExpertLoads::SlotMembers& ExpertLoads::members_of(int32_t slot) {
  if (slot_members_.size() < static_cast<size_t>(slots_.num_slots())) slot_members_.resize(static_cast<size_t>(slots_.num_slots()));
  SlotMembers& m = slot_members_[static_cast<size_t>(slot)];
  if (m.known) return m;
  m.known = true;
  slots_.for_each_rank(slot, [&](int64_t rank) {
    const int64_t gid = g_.plan.group_id(rank, GroupKind::ep);
    const auto seen = std::find(m.groups.begin(), m.groups.end(), gid);
    const auto index = static_cast<uint32_t>(seen - m.groups.begin());
    if (seen == m.groups.end()) m.groups.push_back(gid);
    m.ranks.emplace_back(index, static_cast<uint32_t>(g_.plan.group_rank(rank, GroupKind::ep)));
  });
  return m;
}

const ExpertLoads::SlotLoad& ExpertLoads::load_of(int32_t layer, int32_t micro, int32_t slot) {
  auto [it, inserted] = slot_loads_.try_emplace({layer, micro, static_cast<int64_t>(slot)});
  if (!inserted) return it->second;
  SlotLoad& l = it->second;
  const SlotMembers& m = members_of(slot);
  // The groups are drawn in the order the slot's ranks first reach them, as one pass over the
  // ranks would: the load-balance sum adds in the same order.
  group_samples_.clear();
  for (const int64_t gid : m.groups) group_samples_.push_back(&group_routing(layer, micro, gid));
  for (const auto& [group, me] : m.ranks) {
    const RoutingSample& s = *group_samples_[group];
    l.rows = std::max(l.rows, s.received_rows[me]);
    l.local_rows = std::max(l.local_rows, s.kept_rows[me]);
    l.remote_rows = std::max(l.remote_rows, s.received_rows[me] - s.kept_rows[me]);
    l.wire_assignments = std::max(l.wire_assignments, s.worst_wire_assignments);
  }
  return l;
}

// Its part (all, or under local-first the local or remote assignments) of the slot's load over
// that part's expected rows. A chunk of the dispatch was built with its share of the part, so
// the same ratio applies.
double ExpertLoads::rows_scale(int32_t slot, const Op& op) {
  if (op.routing_layer < 0 || !routing_ || (op.kind != OpKind::grouped_gemm && op.kind != OpKind::lora_gemm)) return 1.0;
  const int64_t ep = g_.plan.group_size(GroupKind::ep);
  if (ep <= 1) return 1.0;
  const int64_t rows_expected = routing_->expected_rows(g_.routed_tokens_per_micro_batch());
  const double expected = static_cast<double>(routed_part_rows(rows_expected, ep, op.routing_part));
  const SlotLoad& l = load_of(op.routing_layer, op.micro, slot);
  const double rows = op.routing_part == RoutingPart::all ? l.rows
                      : op.routing_part == RoutingPart::local ? l.local_rows
                                                               : l.remote_rows;
  return expected > 0 ? rows / expected : 1.0;
}

double ExpertLoads::comm_bytes(const Op& op, const std::vector<std::pair<int32_t, uint32_t>>& met, const GroupPlacement& gp) {
  if (!(op.kind == OpKind::all_to_all && routing_ && op.routing_layer >= 0 && gp.size > 1)) return op.comm_bytes;
  // All-to-all-v: sized by the busiest member's traffic, in nccl-tests' convention; the graph
  // sized the op's buffer at the expected rows.
  const double assignments = static_cast<double>(routing_->expected_rows(g_.routed_tokens_per_micro_batch()));
  double worst = 0;
  for (const auto& [s, i] : met) worst = std::max(worst, load_of(op.routing_layer, op.micro, s).wire_assignments);
  return worst * (op.comm_bytes / assignments) * static_cast<double>(gp.size) / static_cast<double>(gp.size - 1);
}

}  // namespace moesim
