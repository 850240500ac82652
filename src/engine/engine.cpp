// SPDX-License-Identifier: MIT
#include "engine/engine.hpp"

#include "core/error.hpp"
#include "core/limits.hpp"
#include "engine/event_queue.hpp"
#include "engine/max_min.hpp"
#include "engine/program_index.hpp"
#include "engine/rank_classes.hpp"
#include "engine/rendezvous.hpp"
#include "engine/step_analysis.hpp"
#include "engine/switch_tiers.hpp"
#include "graph/queues.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <unordered_map>

namespace moesim {
namespace {

Picoseconds to_ps(double seconds) { return static_cast<Picoseconds>(std::llround(seconds * 1e12)); }

// The engine's clock ends at limits::kMaxSimulatedSeconds: every event time is at most this, and
// so is every duration added to one, so their sum stays far below int64's 9.2e18 ps.
constexpr Picoseconds kClockEnd = static_cast<Picoseconds>(limits::kMaxSimulatedSeconds * 1e12);

// Each simulated rank's shared resources: its scale-up port, its NIC, and its link to host memory
// in each direction (all of capacity 1 = their full bandwidth).
constexpr int kScaleUpPort = 0;
constexpr int kNicPort = 1;
constexpr int kToHostPort = 2;
constexpr int kToDevicePort = 3;
constexpr int kPortsPerSlot = 4;


// A transfer between members: one flow that occupies each member's port.
struct Flow {
  bool active = false;
  double remaining = 0;  // seconds at full rate (as of `updated`)
  Picoseconds updated = 0;
  uint64_t version = 0;
  std::vector<int32_t> ports;
  std::vector<double> weights;  // per port: the share of it the flow takes at full rate
  std::vector<std::pair<int32_t, uint32_t>> members;  // (slot, op) completed when the flow ends
};

// Routing of one MoE layer's micro-batch over one EP group, shared by its dispatch, combine and
// their backward (the same tokens travel).
struct RoutingSample {
  std::vector<double> received_rows;  // per member: assignments its experts process
  std::vector<double> kept_rows;      // per member: of those, the ones it routed itself
  double worst_wire_assignments = 0;  // the largest over members of max(sent, received) off the rank
};

// One simulated slot's MoE work in one layer and micro-batch (see Engine::Impl::load_of).
struct SlotLoad {
  double rows = 0;              // assignments its experts process
  double local_rows = 0;        // of those, the ones its rank routed itself (local-first's local part)
  double remote_rows = 0;       // and the ones its peers sent
  double wire_assignments = 0;  // its EP group's busiest member's all-to-all traffic
};

// Hash of the (layer, micro-batch, group or slot) keys of the per-run routing tables.
struct LoadKeyHash {
  size_t operator()(const std::tuple<int32_t, int32_t, int64_t>& k) const {
    uint64_t h = static_cast<uint64_t>(static_cast<uint32_t>(std::get<0>(k)));
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint32_t>(std::get<1>(k));
    h = h * 0x9E3779B97F4A7C15ULL + static_cast<uint64_t>(std::get<2>(k));
    return static_cast<size_t>(h ^ (h >> 29));
  }
};

}  // namespace

struct Engine::Impl {
  const StepGraph& g;
  const CostModel& cost;
  std::vector<ProgramIndex> index;
  int64_t num_ranks;
  int64_t domain_size;
  std::array<GroupPlacement, kNumGroupKinds> placement{};
  std::vector<int32_t> rank_program;  // program of each rank, looked up once
  // Per program, per op: the cost model's kernel time at nominal rows (rows_scale 1), computed on
  // first use and kept for every slot and sampled step (NaN: not yet). Only MoE ops scaled by a
  // routing draw ask the cost model again.
  std::vector<std::vector<double>> nominal_kernel_s;
  Picoseconds host_issue = 0;  // the host's time to issue one op (make_ready)

  Impl(const StepGraph& graph, const CostModel& c) : g(graph), cost(c), host_issue(to_ps(graph.host_op_issue_s)) {
    for (const Program& p : g.programs) {
      index.emplace_back(p);
      nominal_kernel_s.emplace_back(p.ops.size(), std::numeric_limits<double>::quiet_NaN());
    }
    num_ranks = g.plan.num_ranks();
    rank_program.resize(static_cast<size_t>(num_ranks));
    for (int64_t r = 0; r < num_ranks; ++r) rank_program[static_cast<size_t>(r)] = static_cast<int32_t>(g.plan.program_of(r));
    domain_size = cost.hardware().fabric.scale_up.domain_size;
    for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
      placement[static_cast<size_t>(kind)] = placement_of(g.plan.members(0, kind), domain_size);
    }
  }

  // ---- per-run state ----
  // The ranks simulated, "slots": every rank, or with distinct_ranks one representative per class
  // of interchangeable ranks (rank_classes.hpp). All per-rank state below is per slot.
  EngineOptions opt;
  const RoutingSampler* routing_ = nullptr;  // the run's: the options', else the graph's
  // Under hierarchical dispatch, the share of an expert all-to-all that crosses the scale-out
  // network (CostModel::hierarchical_out_fraction); < 0: direct dispatch. Set once per run.
  double ep_out_fraction_ = -1;
  // Sum and count of the busiest EP member's rows over T k, per sampled (layer, micro, group).
  double ep_load_ratio_sum_ = 0;
  int64_t ep_load_ratio_count_ = 0;
  bool distinct = false;
  RankClasses classes;                 // distinct mode only
  std::vector<int32_t> slot_rank;      // the rank each slot simulates
  std::vector<std::vector<int32_t>> class_prefix;  // distinct mode: per class, its ranks among [0, r)
  std::optional<SwitchTiers> tiers;    // switch instances, numbered after the slots' ports
  // Switch instances and weights per unit of bandwidth of a transfer, by (first rank, last rank,
  // members, direct, scale-out): groups are arithmetic progressions of ranks, so the first, the
  // last and the count name one (and, in distinct mode, the classes taking part).
  std::map<std::tuple<int64_t, int64_t, int64_t, bool, bool>, std::pair<std::vector<int32_t>, std::vector<double>>>
      tier_links;
  int64_t num_slots = 0;
  StepResult result;
  std::vector<Picoseconds> slot_end;
  std::vector<RankMemoryLedger> memory;
  EventQueue events;
  uint64_t last_version = 0;
  std::vector<std::vector<int32_t>> remaining;  // per slot, per op
  std::vector<std::vector<Picoseconds>> started;
  std::vector<std::vector<Picoseconds>> ended;
  std::vector<std::vector<OpState>> state;  // per slot, per op
  std::vector<int32_t> comm_in_flight;
  std::vector<std::array<Picoseconds, kNumOpKinds>> busy;
  Rendezvous rendezvous;
  std::vector<Rendezvous::Member> met;  // scratch: the members of a transfer that can start
  std::vector<Flow> flows;
  std::vector<uint32_t> free_flows;
  std::vector<std::pair<int32_t, uint32_t>> done_members;  // scratch of a finishing flow
  MaxMinSharing sharing;           // rates of the active flows over ports and switch instances
  std::vector<double> old_rate;    // scratch of reshare
  // Looked up per MoE op: hashed, not ordered (never iterated).
  std::unordered_map<std::tuple<int32_t, int32_t, int64_t>, RoutingSample, LoadKeyHash> routing;  // (layer, micro, EP group id)
  std::unordered_map<std::tuple<int32_t, int32_t, int64_t>, SlotLoad, LoadKeyHash> slot_load;     // (layer, micro, slot)
  // What assign_slots() and the switch tiers were last built for: sampled steps of one graph with
  // the same options share them (the classes, the tiers' resources, tier_links).
  bool slots_built = false;
  bool slots_distinct = false;
  std::vector<double> slots_speed;

  void schedule(Picoseconds t, EventKind kind, int32_t slot, uint32_t id, uint64_t version = 0) {
    events.push(t, kind, slot, id, version);
  }

  // The time `seconds` after `t`, when the clock holds it; else the step is refused as bad input
  // (inputs within their limits can still ask for a step of years: huge ops on slow hardware),
  // naming the op (of `slot`) that would run past the end.
  Picoseconds after(Picoseconds t, double seconds, int32_t slot, uint32_t op_index) const {
    if (seconds <= limits::kMaxSimulatedSeconds) {
      const Picoseconds end = t + to_ps(seconds);  // t <= kClockEnd: no overflow
      if (end <= kClockEnd) return end;
    }
    const Program& p = program_of(slot);
    char shown[64];
    std::snprintf(shown, sizeof shown, "%g s from %g s", seconds, static_cast<double>(t) * 1e-12);
    throw InputError(g.source.empty() ? g.scenario : g.source, "",
                     "the simulated step would last more than " + std::to_string(static_cast<int64_t>(limits::kMaxSimulatedSeconds)) +
                         " s, moesim's limit (docs/limits.md): op " + p.names[p.ops[op_index].name] + " of rank " +
                         std::to_string(rank_of_slot(slot)) + " takes " + shown);
  }

  int32_t rank_of_slot(int32_t slot) const { return slot_rank[static_cast<size_t>(slot)]; }
  int32_t slot_of(int64_t rank) const { return distinct ? classes.class_of[static_cast<size_t>(rank)] : static_cast<int32_t>(rank); }
  const Program& program_of(int32_t slot) const {
    return g.programs[static_cast<size_t>(rank_program[static_cast<size_t>(rank_of_slot(slot))])];
  }

  // The slots a collective of `kind` on `slot` waits for: its group's members, or their classes.
  int64_t group_need(int32_t slot, GroupKind kind) const {
    return distinct ? static_cast<int64_t>(classes.group_classes[static_cast<size_t>(kind)][static_cast<size_t>(slot)].size())
                    : g.plan.group_size(kind);
  }
  int64_t group_key(int32_t slot, GroupKind kind) const {
    return distinct ? classes.group_classes[static_cast<size_t>(kind)][static_cast<size_t>(slot)].front()
                    : g.plan.group_id(slot, kind);
  }
  template <typename F>
  void for_each_group_slot(int32_t slot, GroupKind kind, F&& f) const {
    if (distinct) {
      for (int32_t s : classes.group_classes[static_cast<size_t>(kind)][static_cast<size_t>(slot)]) f(s);
    } else {
      for (int64_t m = 0; m < g.plan.group_size(kind); ++m) f(static_cast<int32_t>(g.plan.member(slot, kind, m)));
    }
  }

  void apply_effects(int32_t slot, const Op& op, bool at_start, Picoseconds t, uint32_t op_index) {
    if (op.num_effects == 0) return;
    RankMemoryLedger& m = memory[static_cast<size_t>(slot)];
    m.apply(program_of(slot), op, op_index, at_start, t);
    if (opt.record_timeline && rank_of_slot(slot) < opt.record_memory_ranks) {
      result.timeline.memory.push_back(MemorySample{rank_of_slot(slot), t, m.hbm_bytes(), m.ddr_bytes(),
                                                    m.reserved_hbm_bytes(g.allocator_fragmentation)});
    }
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
  const RoutingSample& group_routing(int32_t layer, int32_t micro, int64_t rank) {
    const int64_t gid = g.plan.group_id(rank, GroupKind::ep);
    auto [it, inserted] = routing.try_emplace({layer, micro, gid});
    if (!inserted) return it->second;
    const auto n = static_cast<size_t>(g.plan.group_size(GroupKind::ep));
    RoutingSample& s = it->second;
    const int64_t tokens = g.routed_tokens_per_micro_batch();
    std::vector<int64_t> received(n), kept(n);
    std::vector<int64_t> copies, kept_copies;  // device-limited direct dispatch: what crosses the wire
    double sent = static_cast<double>(tokens * routing_->top_k());
    if (routing_->dedups_devices() && ep_out_fraction_ < 0) {
      copies.resize(n);
      kept_copies.resize(n);
      routing_->sample_group_copies(opt.step, layer, micro, gid, tokens, copies, kept_copies, received, kept);
      sent = static_cast<double>(tokens * routing_->units_reached());
    } else {
      routing_->sample_group_loads(opt.step, layer, micro, gid, tokens, received, kept);
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
        const int64_t processed = routing_->processed_rows(opt.step, layer, micro, gid, static_cast<int64_t>(i), tokens, received[i]);
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
  const SlotLoad& load_of(int32_t layer, int32_t micro, int32_t slot) {
    auto [it, inserted] = slot_load.try_emplace({layer, micro, static_cast<int64_t>(slot)});
    if (!inserted) return it->second;
    SlotLoad& l = it->second;
    auto add = [&](int64_t rank) {
      const RoutingSample& s = group_routing(layer, micro, rank);
      const auto me = static_cast<size_t>(g.plan.group_rank(rank, GroupKind::ep));
      l.rows = std::max(l.rows, s.received_rows[me]);
      l.local_rows = std::max(l.local_rows, s.kept_rows[me]);
      l.remote_rows = std::max(l.remote_rows, s.received_rows[me] - s.kept_rows[me]);
      l.wire_assignments = std::max(l.wire_assignments, s.worst_wire_assignments);
    };
    if (distinct) {
      for (int32_t rank : classes.members[static_cast<size_t>(slot)]) add(rank);
    } else {
      add(slot);
    }
    return l;
  }

  // A routed GEMM's sampled rows over the rows it was built with: its part (all, or under
  // local-first the local or remote assignments) of the slot's load over that part's expected
  // rows. A chunk of the dispatch was built with its share of the part, so the same ratio applies.
  double rows_scale(int32_t slot, const Op& op) {
    if (op.routing_layer < 0 || !routing_ || (op.kind != OpKind::grouped_gemm && op.kind != OpKind::lora_gemm)) return 1.0;
    const int64_t ep = g.plan.group_size(GroupKind::ep);
    if (ep <= 1) return 1.0;
    const int64_t assignments = g.routed_tokens_per_micro_batch() * routing_->top_k();
    const double expected = static_cast<double>(routed_part_rows(assignments, ep, op.routing_part));
    const SlotLoad& l = load_of(op.routing_layer, op.micro, slot);
    const double rows = op.routing_part == RoutingPart::all ? l.rows
                        : op.routing_part == RoutingPart::local ? l.local_rows
                                                                 : l.remote_rows;
    return expected > 0 ? rows / expected : 1.0;
  }

  void finish_op(int32_t slot, uint32_t op_index, Picoseconds t) {
    const Program& p = program_of(slot);
    const Op& op = p.ops[op_index];
    apply_effects(slot, op, false, t, op_index);
    const Picoseconds start = started[static_cast<size_t>(slot)][op_index];
    ended[static_cast<size_t>(slot)][op_index] = t;
    state[static_cast<size_t>(slot)][op_index] = OpState::done;
    busy[static_cast<size_t>(slot)][static_cast<size_t>(op.kind)] += t - start;
    if (is_communication(op.kind)) --comm_in_flight[static_cast<size_t>(slot)];
    if (opt.record_timeline) {
      result.timeline.records.push_back(
          ExecRecord{rank_of_slot(slot), static_cast<int32_t>(p.stage), op_index, op.stream, start, t});
    }
    auto& rem = remaining[static_cast<size_t>(slot)];
    const ProgramIndex& ix = index[static_cast<size_t>(p.stage)];
    for (uint32_t k = ix.succ_begin[op_index]; k < ix.succ_begin[op_index + 1]; ++k) {
      const uint32_t s = ix.succ[k];
      if (--rem[s] == 0) make_ready(slot, s, t);
    }
    slot_end[static_cast<size_t>(slot)] = std::max(slot_end[static_cast<size_t>(slot)], t);
  }

  // The host issues a rank's ops in program order, one every host_issue (StepGraph::host_op_issue_s),
  // and never waits for the GPU: op i is issued at i x host_issue, and an op whose dependencies
  // are done starts then at the earliest. 0: the host is always ahead.
  void make_ready(int32_t slot, uint32_t op_index, Picoseconds t) {
    const Picoseconds issued = host_issue * static_cast<Picoseconds>(op_index);
    if (issued > t) {
      schedule(issued, EventKind::op_issued, slot, op_index);
      return;
    }
    start_op(slot, op_index, t);
  }

  void start_op(int32_t slot, uint32_t op_index, Picoseconds t) {
    const Program& p = program_of(slot);
    const Op& op = p.ops[op_index];
    started[static_cast<size_t>(slot)][op_index] = t;
    state[static_cast<size_t>(slot)][op_index] = OpState::running;
    apply_effects(slot, op, true, t, op_index);
    if (op.kind == OpKind::swap_out || op.kind == OpKind::swap_in) {
      start_copy(slot, op_index, op, t);
      return;
    }
    if (!is_communication(op.kind)) {
      const double scale = rows_scale(slot, op);
      double seconds;
      if (scale == 1.0) {
        double& nominal = nominal_kernel_s[static_cast<size_t>(p.stage)][op_index];
        if (std::isnan(nominal)) nominal = cost.kernel_seconds(op, 1.0);
        seconds = nominal;
      } else {
        seconds = cost.kernel_seconds(op, scale);
      }
      if (!opt.rank_speed.empty()) seconds *= opt.rank_speed[static_cast<size_t>(rank_of_slot(slot))];
      if (op.stream == Stream::compute && comm_in_flight[static_cast<size_t>(slot)] > 0) {
        seconds *= 1 + cost.overlap_slowdown();
      }
      schedule(after(t, seconds, slot, op_index), EventKind::op_done, slot, op_index);
      return;
    }
    if (is_p2p(op.kind)) {
      start_p2p(slot, op_index, op, t);
      return;
    }
    ++comm_in_flight[static_cast<size_t>(slot)];
    const int64_t key = group_key(slot, op.group);
    const int32_t match = index[static_cast<size_t>(p.stage)].match[op_index];
    if (!rendezvous.arrive(op.group, key, match, group_need(slot, op.group), {slot, op_index}, met)) return;
    // Everyone is here: the transfer starts after its latency.
    const GroupPlacement& gp = placement[static_cast<size_t>(op.group)];
    double bytes = op.comm_bytes;
    if (op.kind == OpKind::all_to_all && routing_ && op.routing_layer >= 0 && gp.size > 1) {
      // All-to-all-v: sized by the busiest member's traffic, in nccl-tests' convention.
      const double assignments = static_cast<double>(g.routed_tokens_per_micro_batch() * routing_->top_k());
      double worst = 0;
      for (const auto& [s, i] : met) worst = std::max(worst, load_of(op.routing_layer, op.micro, s).wire_assignments);
      bytes = worst * (op.comm_bytes / assignments) * static_cast<double>(gp.size) / static_cast<double>(gp.size - 1);
    }
    const bool hierarchical = op.kind == OpKind::all_to_all && op.routing_layer >= 0 && ep_out_fraction_ >= 0;
    const CollectiveCost c =
        hierarchical ? cost.hierarchical_all_to_all(bytes, gp, ep_out_fraction_) : cost.collective(op.kind, bytes, gp);
    launch_flow(met, c, t, gp.size > 1, Participants{rank_of_slot(slot), op.group, -1}, op.kind == OpKind::all_to_all);
  }

  void start_p2p(int32_t slot, uint32_t op_index, const Op& op, Picoseconds t) {
    const int64_t rank = rank_of_slot(slot);
    const int64_t me = g.plan.group_rank(rank, op.group);
    const int64_t peer_index = me + op.peer_offset;
    if (peer_index < 0 || peer_index >= g.plan.group_size(op.group)) {
      ++comm_in_flight[static_cast<size_t>(slot)];  // balanced in finish_op
      schedule(t, EventKind::op_done, slot, op_index);  // the first or last member: nothing to exchange
      return;
    }
    const int64_t peer = g.plan.member(rank, op.group, peer_index);
    const bool sends = op.kind == OpKind::send;
    const int64_t sender = sends ? rank : peer;
    const int64_t receiver = sends ? peer : rank;
    const int64_t sender_slot = slot_of(sender);
    const int64_t receiver_slot = slot_of(receiver);
    // The channel: pipeline activations and gradients between the same two stages are separate
    // streams of messages (their own queues, queues.hpp); each is matched in order.
    const int channel = static_cast<int>(op.group) * 2 + (is_pipeline_p2p(op) && op.phase != Phase::fwd ? 1 : 0);
    if (!rendezvous.post(channel, sender_slot, receiver_slot, sends, {slot, op_index}, met)) return;
    // A posted send or receive only waits for its peer; it interferes with compute (the overlap
    // slowdown) from when the pair meets and data moves.
    for (const auto& [s, i] : met) ++comm_in_flight[static_cast<size_t>(s)];
    GroupPlacement gp{2, sender / domain_size == receiver / domain_size ? 1 : 2, 1};
    const CollectiveCost c = cost.collective(OpKind::send, op.comm_bytes, gp);
    launch_flow(met, c, t, true, Participants{sender, op.group, receiver}, true);
  }

  // A copy between HBM and host memory: a flow on the slot's host link in its direction, and on
  // its scale-up port too when host memory sits behind the scale-up fabric, there taking the
  // share of the port that the copy's bandwidth is of the port's.
  void start_copy(int32_t slot, uint32_t op_index, const Op& op, Picoseconds t) {
    const HostMemorySpec& host = cost.hardware().device.host_memory;
    const CostModel::CopyCost copy = cost.host_copy(op.kind, op.comm_bytes);
    const double copy_bandwidth = copy.bandwidth;
    const uint32_t id = new_flow();
    Flow& f = flows[id];
    f.members.emplace_back(slot, op_index);
    f.remaining = op.comm_bytes / copy_bandwidth;
    if (f.remaining > 0) {
      f.ports.push_back(slot * kPortsPerSlot + (op.kind == OpKind::swap_out ? kToHostPort : kToDevicePort));
      f.weights.push_back(1.0);
      if (host.over_scale_up) {
        f.ports.push_back(slot * kPortsPerSlot + kScaleUpPort);
        f.weights.push_back(copy_bandwidth / cost.scale_up_bandwidth());
      }
    }
    schedule(after(t, copy.latency_s, slot, op_index), EventKind::transfer_start, 0, id);
  }

  uint32_t new_flow() {
    uint32_t id;
    if (!free_flows.empty()) {
      id = free_flows.back();
      free_flows.pop_back();
    } else {
      id = static_cast<uint32_t>(flows.size());
      flows.emplace_back();
    }
    // Reset, keeping the vectors' capacity for the next flow.
    Flow& f = flows[id];
    f.active = false;
    f.remaining = 0;
    f.updated = 0;
    f.ports.clear();
    f.weights.clear();
    f.members.clear();
    return id;
  }

  // Who takes part in a transfer: the whole group of `kind` around `rank` (also in distinct mode,
  // where the flow's members are one slot per class), or the pair `rank`, `peer` of a send.
  struct Participants {
    int64_t rank;
    GroupKind kind;
    int64_t peer;  // -1: a collective
  };

  // One flow on every member slot's port and on the switch instances the participants' traffic
  // crosses. `direct`: all-to-all or point-to-point traffic (else ring-like; see switch_tiers.hpp).
  void launch_flow(const std::vector<std::pair<int32_t, uint32_t>>& members, const CollectiveCost& c, Picoseconds t,
                   bool uses_fabric, const Participants& who, bool direct) {
    const uint32_t id = new_flow();
    Flow& f = flows[id];
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
      const int64_t n = pair ? 2 : g.plan.group_size(who.kind);
      const int64_t first = pair ? std::min(who.rank, who.peer) : g.plan.member(who.rank, who.kind, 0);
      const int64_t last = pair ? std::max(who.rank, who.peer) : g.plan.member(who.rank, who.kind, n - 1);
      auto [it, inserted] = tier_links.try_emplace(std::make_tuple(first, last, n, direct, scale_out));
      if (inserted) {
        const std::vector<int64_t> ranks = pair ? std::vector<int64_t>{first, last} : g.plan.members(who.rank, who.kind);
        std::function<double(int64_t, int64_t)> participants;
        if (distinct) {
          // Lockstep copies of this flow: every rank of its classes in the switch instance.
          participants = [&](int64_t first, int64_t span) {
            const int64_t last = std::min(first + span, num_ranks);
            double count = 0;
            for (const auto& [slot, op] : f.members) {
              const auto& prefix = class_prefix[static_cast<size_t>(slot)];
              count += static_cast<double>(prefix[static_cast<size_t>(last)] - prefix[static_cast<size_t>(first)]);
            }
            return count;
          };
        }
        tiers->add_links(ranks, direct, scale_out, 1.0, participants, it->second.first, it->second.second);
      }
      const double bandwidth = scale_out ? c.out_bandwidth : c.up_bandwidth;
      const auto& [resources, per_bandwidth] = it->second;
      f.ports.insert(f.ports.end(), resources.begin(), resources.end());
      for (double w : per_bandwidth) f.weights.push_back(w * bandwidth);
    }
    schedule(after(t, c.latency_s, members.front().first, members.front().second), EventKind::transfer_start, 0, id);
  }

  // A flow joins or leaves the resources it crosses (max_min.hpp: only the flows connected to
  // them can change rate); those get their work done so far at the old rate, then new rates and,
  // where the rate changed, new finish times.
  void activate(uint32_t id, Picoseconds t) {
    Flow& f = flows[id];
    f.active = true;
    f.updated = t;
    sharing.add(id, f.ports, f.weights);
    reshare(t, id);
  }

  void deactivate(uint32_t id, Picoseconds t) {
    flows[id].active = false;
    sharing.remove(id);
    reshare(t, -1);
  }

  // `fresh`: a flow just started (always scheduled).
  void reshare(Picoseconds t, int64_t fresh) {
    const std::vector<uint32_t>& component = sharing.affected();
    old_rate.resize(component.size());
    for (size_t i = 0; i < component.size(); ++i) {
      Flow& f = flows[component[i]];
      old_rate[i] = sharing.rate(component[i]);
      f.remaining = std::max(0.0, f.remaining - old_rate[i] * static_cast<double>(t - f.updated) * 1e-12);
      f.updated = t;
    }
    sharing.share();
    if (opt.check_max_min) sharing.check(result.max_min_checks, result.max_min_violations);
    // Only flows whose rate changed get a new finish time; the others' events stay valid.
    for (size_t i = 0; i < component.size(); ++i) {
      const double rate = sharing.rate(component[i]);
      if (rate == old_rate[i] && static_cast<int64_t>(component[i]) != fresh) continue;
      Flow& f = flows[component[i]];
      f.version = ++last_version;  // unique across flows and their reuse: stale events never match
      schedule(after(t, f.remaining / rate, f.members.front().first, f.members.front().second), EventKind::flow_done, 0,
               component[i], f.version);
    }
  }

  RunRecord run_record() const {
    RunRecord r;
    r.plan = &g.plan;
    r.slot_rank = slot_rank;
    for (int32_t s = 0; s < num_slots; ++s) {
      r.program.push_back(&program_of(s));
      r.index.push_back(&index[static_cast<size_t>(program_of(s).stage)]);
    }
    r.started = &started;
    r.ended = &ended;
    r.state = &state;
    r.slot_end = &slot_end;
    r.host_issue = host_issue;
    r.group_slots = [this](int32_t slot, GroupKind kind) {
      std::vector<int32_t> out;
      for_each_group_slot(slot, kind, [&](int32_t s) { out.push_back(s); });
      return out;
    };
    return r;
  }

  void assign_slots() {
    distinct = opt.distinct_ranks;
    slot_rank.clear();
    if (distinct) {
      classes = interchangeable_ranks(g.plan, rank_program, opt.rank_speed);
      for (int32_t c = 0; c < classes.size(); ++c) slot_rank.push_back(classes.representative(c));
      class_prefix.assign(static_cast<size_t>(classes.size()), std::vector<int32_t>(static_cast<size_t>(num_ranks) + 1, 0));
      for (int32_t c = 0; c < classes.size(); ++c) {
        auto& prefix = class_prefix[static_cast<size_t>(c)];
        for (int64_t r = 0; r < num_ranks; ++r) {
          prefix[static_cast<size_t>(r) + 1] = prefix[static_cast<size_t>(r)] + (classes.class_of[static_cast<size_t>(r)] == c);
        }
      }
    } else {
      classes = RankClasses{};
      for (int32_t r = 0; r < num_ranks; ++r) slot_rank.push_back(r);
    }
    num_slots = static_cast<int64_t>(slot_rank.size());
  }

  StepResult run(const EngineOptions& options) {
    opt = options;
    routing_ = opt.routing ? opt.routing : (g.routing ? &*g.routing : nullptr);
    const GroupPlacement& ep = placement[static_cast<size_t>(GroupKind::ep)];
    ep_out_fraction_ = routing_ && g.expert_dispatch == ExpertDispatch::hierarchical && ep.num_domains > 1
                           ? CostModel::hierarchical_out_fraction(routing_->num_experts(), routing_->top_k(), ep,
                                                                  routing_->limit_units(),
                                                                  routing_->limited() ? routing_->limit_per_token() : 0)
                           : -1;
    ep_load_ratio_sum_ = 0;
    ep_load_ratio_count_ = 0;
    // The classes and the switch tiers depend only on the graph and on these options.
    const bool same_slots = slots_built && slots_distinct == opt.distinct_ranks && slots_speed == opt.rank_speed;
    if (!same_slots) {
      assign_slots();
      slots_built = true;
      slots_distinct = opt.distinct_ranks;
      slots_speed = opt.rank_speed;
    }
    result = StepResult{};
    result.num_simulated_ranks = num_slots;
    const auto n = static_cast<size_t>(num_slots);
    slot_end.assign(n, 0);

    // Per-slot arrays keep their capacity from run to run (sampled steps of one graph): resized
    // here, refilled below.
    remaining.resize(n);
    started.resize(n);
    ended.resize(n);
    state.resize(n);
    comm_in_flight.assign(n, 0);
    memory.resize(n);
    busy.assign(n, {});
    events.clear();
    rendezvous.clear();
    flows.clear();
    free_flows.clear();
    last_version = 0;
    routing.clear();
    slot_load.clear();
    if (!same_slots) {
      tiers.emplace(cost, num_ranks, static_cast<int32_t>(n * kPortsPerSlot));
      tier_links.clear();
    }
    sharing.reset(n * kPortsPerSlot + static_cast<size_t>(tiers->num_resources()));
    for (int32_t s = 0; s < num_slots; ++s) {
      const Program& p = program_of(s);
      memory[static_cast<size_t>(s)].reset(p.persistent.total(), p.persistent.host_total());
      remaining[static_cast<size_t>(s)] = index[static_cast<size_t>(p.stage)].num_preds;
      started[static_cast<size_t>(s)].assign(p.ops.size(), 0);
      ended[static_cast<size_t>(s)].assign(p.ops.size(), 0);
      state[static_cast<size_t>(s)].assign(p.ops.size(), OpState::waiting);
    }
    for (int32_t s = 0; s < num_slots; ++s) {
      const auto& rem = remaining[static_cast<size_t>(s)];
      for (uint32_t i = 0; i < rem.size(); ++i) {
        if (rem[i] == 0) make_ready(s, i, 0);
      }
    }
    while (!events.empty()) {
      if (opt.max_events > 0 && result.num_events == opt.max_events) {
        result.complete = false;
        return std::move(result);
      }
      const Event e = events.pop();
      ++result.num_events;
      result.step_time = e.time;  // the time reached, should the run stop here
      switch (e.kind) {
        case EventKind::op_done: finish_op(e.rank, e.id, e.time); break;
        case EventKind::transfer_start: activate(e.id, e.time); break;
        case EventKind::op_issued: start_op(e.rank, e.id, e.time); break;
        case EventKind::flow_done: {
          Flow& f = flows[e.id];
          if (!f.active || e.version != f.version) break;  // rescheduled since
          deactivate(e.id, e.time);
          // Finishing the members may start flows that reuse this one: iterate a copy.
          done_members.assign(f.members.begin(), f.members.end());
          free_flows.push_back(e.id);
          for (const auto& [slot, op] : done_members) finish_op(slot, op, e.time);
          break;
        }
      }
    }
    const RunRecord record = run_record();
    if (const std::string stuck = deadlock_report(record); !stuck.empty()) {
      throw SimulationError("the step did not complete: " + stuck);
    }
    std::vector<RankMemory> slot_memory;
    for (RankMemoryLedger& m : memory) slot_memory.push_back(m.finish(g.allocator_fragmentation));
    if (opt.record_timeline) {
      // The allocator places an instant's tensors once the instant is complete: a last sample
      // at the end carries the reserve the report shows as the peak.
      for (int32_t s = 0; s < num_slots; ++s) {
        if (rank_of_slot(s) >= opt.record_memory_ranks) continue;
        const RankMemory& m = slot_memory[static_cast<size_t>(s)];
        result.timeline.memory.push_back(MemorySample{rank_of_slot(s), slot_end[static_cast<size_t>(s)],
                                                      m.final_hbm_bytes, memory[static_cast<size_t>(s)].ddr_bytes(),
                                                      m.peak_hbm_bytes});
      }
    }
    // Every rank gets its slot's results.
    result.rank_end.resize(static_cast<size_t>(num_ranks));
    result.memory.resize(static_cast<size_t>(num_ranks));
    for (int64_t r = 0; r < num_ranks; ++r) {
      result.rank_end[static_cast<size_t>(r)] = slot_end[static_cast<size_t>(slot_of(r))];
      result.memory[static_cast<size_t>(r)] = slot_memory[static_cast<size_t>(slot_of(r))];
    }
    // The breakdown is the rank that ends the step; of several, the lowest-numbered.
    int32_t slowest = 0;
    for (int32_t s = 1; s < num_slots; ++s) {
      const Picoseconds end = slot_end[static_cast<size_t>(s)], best = slot_end[static_cast<size_t>(slowest)];
      if (end > best || (end == best && rank_of_slot(s) < rank_of_slot(slowest))) slowest = s;
    }
    result.slowest_rank = rank_of_slot(slowest);
    result.step_time = slot_end[static_cast<size_t>(slowest)];
    result.ep_load_imbalance = ep_load_ratio_count_ > 0 ? ep_load_ratio_sum_ / static_cast<double>(ep_load_ratio_count_) : 0;
    result.timeline.step_end = result.step_time;
    const auto& b = busy[static_cast<size_t>(slowest)];
    for (const auto& [name, kind] : EnumNames<OpKind>::names) {
      const Picoseconds v = b[static_cast<size_t>(kind)];
      if (v == 0) continue;
      if (is_communication(kind)) {
        result.comm_busy.emplace_back(kind, v);
      } else {
        result.compute_busy.emplace_back(kind, v);
      }
    }
    result.top_ops = time_by_op(record, slowest, 12);
    std::tie(result.critical_path, result.critical_path_length) = critical_path(record, slowest, 12);
    std::tie(result.compute_stream_busy, result.exposed) = exposed_time(record, slowest);
    if (opt.record_timeline) {
      std::sort(result.timeline.records.begin(), result.timeline.records.end(), [](const ExecRecord& a, const ExecRecord& c) {
        return std::tie(a.start, a.rank, a.stream, a.op) < std::tie(c.start, c.rank, c.stream, c.op);
      });
    }
    return std::move(result);
  }
};

Engine::Engine(const StepGraph& graph, const CostModel& cost) : impl_(std::make_unique<Impl>(graph, cost)) {}
Engine::~Engine() = default;
StepResult Engine::run(const EngineOptions& options) { return impl_->run(options); }

}  // namespace moesim
