// SPDX-License-Identifier: MIT
#include "engine/engine.hpp"

#include "core/error.hpp"
#include "core/limits.hpp"
#include "engine/event_queue.hpp"
#include "engine/expert_loads.hpp"
#include "engine/flow_network.hpp"
#include "engine/program_index.hpp"
#include "engine/rendezvous.hpp"
#include "engine/slot_map.hpp"
#include "engine/step_analysis.hpp"
#include "graph/queues.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <limits>
#include <unordered_map>

namespace moesim {
namespace {

Picoseconds to_ps(double seconds) { return static_cast<Picoseconds>(std::llround(seconds * 1e12)); }

// The engine's clock ends at limits::kMaxSimulatedSeconds: every event time is at most this, and
// so is every duration added to one, so their sum stays far below int64's 9.2e18 ps.
constexpr Picoseconds kClockEnd = static_cast<Picoseconds>(limits::kMaxSimulatedSeconds * 1e12);

// When the host issues each op of `p` (StepGraph::host_op_issue_s, host_kernel_issue_s): in
// program order, spending op_issue + kernels x kernel_issue on each, so op i is issued at
// sum over j < i of (op_issue + num_kernels(j) x kernel_issue), op 0 at 0. Integer picoseconds
// per op, so the sum is exact (i x op_issue when kernel_issue is 0); it saturates just past the
// clock's end, where make_ready refuses the step.
std::vector<Picoseconds> host_issue_times(const Program& p, Picoseconds op_issue, Picoseconds kernel_issue) {
  std::vector<Picoseconds> out(p.ops.size(), 0);
  if (op_issue == 0 && kernel_issue == 0) return out;
  Picoseconds t = 0;
  for (size_t i = 0; i < p.ops.size(); ++i) {
    out[i] = t;
    const auto kernels = static_cast<Picoseconds>(std::max(p.ops[i].num_kernels, 0));
    // t, op_issue (<= 1 s) and the kernels' time, capped at the clock, add up far below int64's end.
    const Picoseconds launches = kernels > 0 && kernel_issue > kClockEnd / kernels ? kClockEnd : kernels * kernel_issue;
    t = std::min(t + op_issue + launches, kClockEnd + 1);
  }
  return out;
}

// The ops of `p` after which the host waits for the GPU (StepGraph::host_waits_for_routing): the
// forward and recomputed routers, in program order.
std::vector<uint32_t> host_wait_ops(const Program& p, bool waits_for_routing) {
  std::vector<uint32_t> out;
  if (!waits_for_routing) return out;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (op.kind == OpKind::router && (op.phase == Phase::fwd || op.phase == Phase::recompute)) out.push_back(i);
  }
  return out;
}

std::array<GroupPlacement, kNumGroupKinds> group_placements(const ParallelPlan& plan, int64_t domain_size) {
  std::array<GroupPlacement, kNumGroupKinds> placement{};
  for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
    placement[static_cast<size_t>(kind)] = placement_of(plan.members(0, kind), domain_size);
  }
  return placement;
}

}  // namespace

struct Engine::Impl {
  // ---- fixed for the engine's life ----
  const StepGraph& g;
  const CostModel& cost;
  std::vector<ProgramIndex> index;
  int64_t num_ranks;
  int64_t domain_size;
  std::array<GroupPlacement, kNumGroupKinds> placement;
  std::vector<int32_t> rank_program;  // program of each rank, looked up once
  // Per program, per op: the cost model's kernel time at nominal rows (rows_scale 1), computed on
  // first use and kept for every slot and sampled step (NaN: not yet). Only MoE ops scaled by a
  // routing draw ask the cost model again.
  std::vector<std::vector<double>> nominal_kernel_s;
  // The cost model of a part whose compute-bound kernels run `factor` slower
  // (EngineOptions::rank_compute_slowdown), one per factor asked for, made on first use.
  std::vector<std::pair<double, CostModel>> slowed_costs;
  // Per program, per op: when the host issues it if it never waits (host_issue_times; make_ready).
  std::vector<std::vector<Picoseconds>> issue_at;
  // Per program: the ops whose end the host waits for before it issues the next one (host_wait_ops).
  std::vector<std::vector<uint32_t>> host_waits;

  // ---- per-run state ----
  EngineOptions opt;
  // The ranks simulated, "slots": all per-rank state below is per slot.
  SlotMap slots;
  ExpertLoads loads;    // the routing draw's sizes of the MoE ops
  FlowNetwork network;  // the transfers in flight and their rates
  // What the slots and the network's resources were last built for: sampled steps of one graph
  // with the same options share them (the classes, the switch tiers, their crossings).
  bool slots_built = false;
  bool slots_distinct = false;
  std::vector<double> slots_speed;
  std::vector<double> slots_compute_slowdown;
  StepResult result;
  std::vector<Picoseconds> slot_end;
  std::vector<RankMemoryLedger> memory;
  SlabTracks slab_tracks;  // the ledgers' slabs, shared where their placements agree
  // Tracks kept for the next run at most (each holds a slab and a log of its program's effects).
  static constexpr int32_t kMaxKeptSlabTracks = 16;
  EventQueue events;
  // Per slot, per op: its predecessors not yet done while it waits, then kOpRunning, then kOpDone
  // (step_analysis.hpp); its start time is not kept, the analyses derive it (start_of).
  std::vector<std::vector<int32_t>> remaining;
  // Per slot, per queue: when the op running on it started (a queue runs one op at a time).
  std::vector<std::array<Picoseconds, kNumQueues>> queue_start;
  // Traced runs only: an expert all-to-all's bytes as the routing draw sized it, per (slot, op).
  std::unordered_map<uint64_t, double> routed_bytes;
  std::vector<std::vector<Picoseconds>> ended;  // per slot, per op
  // Per slot, where the host stands when it waits for the GPU (host_waits): ops after a wait op
  // that has not ended are parked; once it ends at t, the host resumes at t and every later op is
  // issued `delay` after issue_at says, delay = max(delay, t - issue_at[wait + 1]).
  struct HostState {
    size_t next_wait = 0;  // into host_waits: the first wait op not yet ended
    std::vector<uint32_t> parked;  // ready ops the host has not issued yet
    HostDelays delays{{0, 0}};     // (first op, delay) from each resumption on
  };
  std::vector<HostState> host;
  std::vector<int32_t> comm_in_flight;
  std::vector<std::array<Picoseconds, kNumOpKinds>> busy;
  Rendezvous rendezvous;
  std::vector<Rendezvous::Member> met;  // scratch: the members of a transfer that can start
  std::vector<FlowNetwork::Member> done_members;  // scratch of a finishing flow

  Impl(const StepGraph& graph, const CostModel& c)
      : g(graph),
        cost(c),
        num_ranks(graph.plan.num_ranks()),
        domain_size(c.hardware().fabric.scale_up.domain_size),
        placement(group_placements(graph.plan, domain_size)),
        slots(graph.plan),
        loads(graph, slots, placement[static_cast<size_t>(GroupKind::ep)]),
        network(graph.plan, c) {
    for (const Program& p : g.programs) {
      index.emplace_back(p);
      nominal_kernel_s.emplace_back(p.ops.size(), std::numeric_limits<double>::quiet_NaN());
      issue_at.push_back(host_issue_times(p, to_ps(g.host_op_issue_s), to_ps(g.host_kernel_issue_s)));
      host_waits.push_back(host_wait_ops(p, g.host_waits_for_routing));
    }
    rank_program.resize(static_cast<size_t>(num_ranks));
    for (int64_t r = 0; r < num_ranks; ++r) rank_program[static_cast<size_t>(r)] = static_cast<int32_t>(g.plan.program_of(r));
  }

  // ---- the event loop ----
  StepResult run(const EngineOptions& options) {
    begin_run(options);
    for (int32_t s = 0; s < slots.num_slots(); ++s) {
      const auto& rem = remaining[static_cast<size_t>(s)];
      for (uint32_t i = 0; i < rem.size(); ++i) {
        if (rem[i] == 0) make_ready(s, i, 0);
      }
    }
    Picoseconds now = 0;
    for (;;) {
      // Transfers share the fabric once per instant, after all its starts and ends.
      if (network.pending() && (events.empty() || events.next_time() > now)) reschedule(network.reshare(now), now);
      if (events.empty()) break;
      if (opt.max_events > 0 && result.num_events == opt.max_events) {
        result.complete = false;
        return std::move(result);
      }
      const Event e = events.pop();
      ++result.num_events;
      now = e.time;
      result.step_time = e.time;  // the time reached, should the run stop here
      switch (e.kind) {
        case EventKind::op_done: finish_op(e.rank, e.id, e.time); break;
        case EventKind::transfer_start: network.start(e.id, e.time); break;
        case EventKind::op_issued: start_op(e.rank, e.id, e.time); break;
        case EventKind::flow_done: {
          if (!network.current(e.id, e.version)) break;  // rescheduled since
          network.end(e.id);
          // Finishing the members may start flows that reuse this one: iterate a copy.
          done_members.assign(network.members(e.id).begin(), network.members(e.id).end());
          network.release(e.id);
          for (const auto& [slot, op] : done_members) finish_op(slot, op, e.time);
          break;
        }
      }
    }
    return finish_run();
  }

  // The host issues a rank's ops in program order (issue_at), waiting only after a wait op
  // (host_waits) until that op has ended: an op whose dependencies are done starts at its issue at
  // the earliest, and one behind a wait op not yet ended is parked until it ends. Issue times of
  // 0 (no host cost) and no waits: the host is always ahead.
  void make_ready(int32_t slot, uint32_t op_index, Picoseconds t) {
    const size_t prog = program_index(slot);
    HostState& h = host[static_cast<size_t>(slot)];
    const auto& waits = host_waits[prog];
    if (h.next_wait < waits.size() && op_index > waits[h.next_wait]) {
      h.parked.push_back(op_index);
      return;
    }
    const Picoseconds issued = issue_at[prog][op_index] + h.delays.back().second;
    if (issued > t) {
      if (issued > kClockEnd) {
        char shown[32];
        std::snprintf(shown, sizeof shown, "%g s", static_cast<double>(issued) * 1e-12);
        past_clock_end(slot, op_index, "is issued by the host after", shown);
      }
      schedule(issued, EventKind::op_issued, slot, op_index);
      return;
    }
    start_op(slot, op_index, t);
  }

  void start_op(int32_t slot, uint32_t op_index, Picoseconds t) {
    const Program& p = program_of(slot);
    const Op& op = p.ops[op_index];
    queue_start[static_cast<size_t>(slot)][static_cast<size_t>(queue_of(op))] = t;
    remaining[static_cast<size_t>(slot)][op_index] = kOpRunning;
    apply_effects(slot, op, true, t, op_index);
    if (op.kind == OpKind::swap_out || op.kind == OpKind::swap_in) {
      start_copy(slot, op_index, op, t);
      return;
    }
    if (!is_communication(op.kind)) {
      schedule(after(t, compute_seconds(slot, p, op_index), slot, op_index), EventKind::op_done, slot, op_index);
      return;
    }
    if (is_p2p(op.kind)) {
      start_p2p(slot, op_index, op, t);
      return;
    }
    ++comm_in_flight[static_cast<size_t>(slot)];
    const int64_t key = slots.group_key(slot, op.group);
    const int32_t match = index[static_cast<size_t>(p.stage)].match[op_index];
    if (!rendezvous.arrive(op.group, key, match, slots.group_need(slot, op.group), {slot, op_index}, met)) return;
    // Everyone is here: the transfer starts after its latency.
    const GroupPlacement& gp = placement[static_cast<size_t>(op.group)];
    const double bytes = loads.comm_bytes(op, met, gp);
    if (opt.record_timeline && op.routing_layer >= 0) {
      for (const auto& [member, member_op] : met) routed_bytes[slot_op_key(member, member_op)] = bytes;
    }
    const bool hierarchical = op.kind == OpKind::all_to_all && op.routing_layer >= 0 && loads.ep_out_fraction() >= 0;
    const CollectiveCost c = hierarchical ? cost.hierarchical_all_to_all(bytes, gp, loads.ep_out_fraction())
                                          : cost.collective(op.kind, bytes, gp);
    launch_flow(c, t, gp.size > 1, {slots.rank_of(slot), op.group, -1}, op.kind == OpKind::all_to_all);
  }

  // A compute op alone on its device, at the rows the routing draw gave the slot, stretched by
  // the rank's speed factor and, on the compute stream, by the overlap slowdown while a transfer
  // of the rank is moving.
  double compute_seconds(int32_t slot, const Program& p, uint32_t op_index) {
    const Op& op = p.ops[op_index];
    const double scale = loads.rows_scale(slot, op);
    const double slowdown = compute_slowdown_of(slot);
    double seconds;
    if (slowdown != 1.0) {
      seconds = slowed_cost(slowdown).kernel_seconds(op, scale);
    } else if (scale == 1.0) {
      double& nominal = nominal_kernel_s[static_cast<size_t>(p.stage)][op_index];
      if (std::isnan(nominal)) nominal = cost.kernel_seconds(op, 1.0);
      seconds = nominal;
    } else {
      seconds = cost.kernel_seconds(op, scale);
    }
    if (!opt.rank_speed.empty()) seconds *= opt.rank_speed[static_cast<size_t>(slots.rank_of(slot))];
    if (op.stream == Stream::compute && comm_in_flight[static_cast<size_t>(slot)] > 0) {
      seconds *= 1 + cost.overlap_slowdown();
    }
    return seconds;
  }

  double compute_slowdown_of(int32_t slot) const {
    return opt.rank_compute_slowdown.empty() ? 1.0 : opt.rank_compute_slowdown[static_cast<size_t>(slots.rank_of(slot))];
  }

  // The cost model in the power state of this one at compute-bound rates `factor` slower.
  const CostModel& slowed_cost(double factor) {
    for (const auto& [f, c] : slowed_costs) {
      if (f == factor) return c;
    }
    PowerState slowed = cost.power_state();
    slowed.clock /= factor;
    for (PowerClass c : {PowerClass::gemm, PowerClass::attention}) slowed.rate[static_cast<size_t>(c)] /= factor;
    return slowed_costs.emplace_back(factor, cost.with_power_state(slowed)).second;
  }

  void start_p2p(int32_t slot, uint32_t op_index, const Op& op, Picoseconds t) {
    const int64_t rank = slots.rank_of(slot);
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
    const int64_t sender_slot = slots.slot_of(sender);
    const int64_t receiver_slot = slots.slot_of(receiver);
    // The channel: pipeline activations and gradients between the same two stages are separate
    // streams of messages (their own queues, queues.hpp); each is matched in order.
    const int channel = static_cast<int>(op.group) * 2 + (is_pipeline_p2p(op) && op.phase != Phase::fwd ? 1 : 0);
    if (!rendezvous.post(channel, sender_slot, receiver_slot, sends, {slot, op_index}, met)) return;
    // A posted send or receive only waits for its peer; it interferes with compute (the overlap
    // slowdown) from when the pair meets and data moves.
    for (const auto& [s, i] : met) ++comm_in_flight[static_cast<size_t>(s)];
    GroupPlacement gp{2, sender / domain_size == receiver / domain_size ? 1 : 2, 1};
    const CollectiveCost c = cost.collective(OpKind::send, op.comm_bytes, gp);
    launch_flow(c, t, true, {sender, op.group, receiver}, true);
  }

  // A copy between HBM and host memory: a flow on the slot's host link (flow_network.hpp).
  void start_copy(int32_t slot, uint32_t op_index, const Op& op, Picoseconds t) {
    const CostModel::CopyCost copy = cost.host_copy(op.kind, op.comm_bytes);
    const uint32_t id = network.add_copy(slot, op_index, op.kind == OpKind::swap_out, op.comm_bytes, copy.bandwidth);
    schedule(after(t, copy.latency_s, slot, op_index), EventKind::transfer_start, 0, id);
  }

  // The transfer among the members just met: a flow that starts after its latency.
  void launch_flow(const CollectiveCost& c, Picoseconds t, bool uses_fabric, const FlowNetwork::Participants& who,
                   bool direct) {
    const uint32_t id = network.add_transfer(met, c, uses_fabric, who, direct);
    schedule(after(t, c.latency_s, met.front().first, met.front().second), EventKind::transfer_start, 0, id);
  }

  // New finish times for the flows whose rate the instant's starts and ends changed; the others'
  // events stay valid.
  void reschedule(const std::vector<uint32_t>& changed, Picoseconds t) {
    if (opt.check_max_min) network.check(result.max_min_checks, result.max_min_violations);
    for (uint32_t id : changed) {
      const auto& [slot, op] = network.members(id).front();
      schedule(after(t, network.seconds_left(id), slot, op), EventKind::flow_done, 0, id, network.version(id));
    }
  }

  static uint64_t slot_op_key(int32_t slot, uint32_t op_index) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(slot)) << 32) | op_index;
  }

  // What a routed op did as the routing draw sized it, for the trace: a grouped GEMM's rows, an
  // expert all-to-all's bytes; -1 for every other op.
  double routed_amount(int32_t slot, uint32_t op_index, const Op& op) {
    if (op.routing_layer < 0) return -1;
    if (op.kind == OpKind::grouped_gemm || op.kind == OpKind::lora_gemm) {
      return static_cast<double>(op.m) * loads.rows_scale(slot, op);
    }
    const auto it = routed_bytes.find(slot_op_key(slot, op_index));
    return it == routed_bytes.end() ? -1 : it->second;
  }

  void finish_op(int32_t slot, uint32_t op_index, Picoseconds t) {
    const Program& p = program_of(slot);
    const Op& op = p.ops[op_index];
    apply_effects(slot, op, false, t, op_index);
    const Picoseconds start = queue_start[static_cast<size_t>(slot)][static_cast<size_t>(queue_of(op))];
    ended[static_cast<size_t>(slot)][op_index] = t;
    auto& rem = remaining[static_cast<size_t>(slot)];
    rem[op_index] = kOpDone;
    busy[static_cast<size_t>(slot)][static_cast<size_t>(op.kind)] += t - start;
    if (is_communication(op.kind)) --comm_in_flight[static_cast<size_t>(slot)];
    if (opt.record_timeline) {
      result.timeline.records.push_back(ExecRecord{slots.rank_of(slot), static_cast<int32_t>(p.stage), op_index,
                                                   op.stream, start, t, routed_amount(slot, op_index, op)});
    }
    const auto& waits = host_waits[program_index(slot)];
    const HostState& h = host[static_cast<size_t>(slot)];
    if (h.next_wait < waits.size() && waits[h.next_wait] == op_index) resume_host(slot, op_index, t);
    const ProgramIndex& ix = index[static_cast<size_t>(p.stage)];
    for (uint32_t k = ix.succ_begin[op_index]; k < ix.succ_begin[op_index + 1]; ++k) {
      const uint32_t s = ix.succ[k];
      if (--rem[s] == 0) make_ready(slot, s, t);
    }
    slot_end[static_cast<size_t>(slot)] = std::max(slot_end[static_cast<size_t>(slot)], t);
  }

  // Wait op `op_index` of `slot` ended at t: the host resumes, issuing the next op at t at the
  // earliest, and the parked ops up to the next wait op become ready, in program order.
  void resume_host(int32_t slot, uint32_t op_index, Picoseconds t) {
    const size_t prog = program_index(slot);
    HostState& h = host[static_cast<size_t>(slot)];
    ++h.next_wait;
    const auto& at = issue_at[prog];
    if (op_index + 1 < at.size() && t > at[op_index + 1] + h.delays.back().second) {
      h.delays.emplace_back(op_index + 1, t - at[op_index + 1]);
    }
    const auto& waits = host_waits[prog];
    const uint32_t bound = h.next_wait < waits.size() ? waits[h.next_wait] : std::numeric_limits<uint32_t>::max();
    std::vector<uint32_t> unparked;
    std::erase_if(h.parked, [&](uint32_t i) {
      if (i > bound) return false;
      unparked.push_back(i);
      return true;
    });
    std::sort(unparked.begin(), unparked.end());
    for (uint32_t i : unparked) make_ready(slot, i, t);
  }

  // An op's memory effects on its slot's ledger (at its start or its end), sampled when recorded.
  void apply_effects(int32_t slot, const Op& op, bool at_start, Picoseconds t, uint32_t op_index) {
    if (op.num_effects == 0) return;
    RankMemoryLedger& m = memory[static_cast<size_t>(slot)];
    m.apply(program_of(slot), op, op_index, at_start, t);
    if (opt.record_timeline && slots.rank_of(slot) < opt.record_memory_ranks) {
      result.timeline.memory.push_back(MemorySample{slots.rank_of(slot), t, m.hbm_bytes(), m.ddr_bytes(),
                                                    m.reserved_hbm_bytes(g.allocator_fragmentation)});
    }
  }

  // ---- helpers ----
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
    char shown[64];
    std::snprintf(shown, sizeof shown, "%g s from %g s", seconds, static_cast<double>(t) * 1e-12);
    past_clock_end(slot, op_index, "takes", shown);
  }

  [[noreturn]] void past_clock_end(int32_t slot, uint32_t op_index, const std::string& what, const std::string& shown) const {
    const Program& p = program_of(slot);
    throw InputError(g.source.empty() ? g.scenario : g.source, "",
                     "the simulated step would last more than " + std::to_string(static_cast<int64_t>(limits::kMaxSimulatedSeconds)) +
                         " s, moesim's limit (docs/limits.md): op " + p.names[p.ops[op_index].name] + " of rank " +
                         std::to_string(slots.rank_of(slot)) + " " + what + " " + shown);
  }

  size_t program_index(int32_t slot) const {
    return static_cast<size_t>(rank_program[static_cast<size_t>(slots.rank_of(slot))]);
  }
  const Program& program_of(int32_t slot) const { return g.programs[program_index(slot)]; }

  // ---- before and after the loop ----
  void begin_run(const EngineOptions& options) {
    opt = options;
    loads.reset(opt.routing ? opt.routing : (g.routing ? &*g.routing : nullptr), opt.step);
    // The classes and the switch tiers depend only on the graph and on these options.
    const bool same_slots = slots_built && slots_distinct == opt.distinct_ranks && slots_speed == opt.rank_speed &&
                            slots_compute_slowdown == opt.rank_compute_slowdown;
    if (!same_slots) {
      slots.assign(rank_program, opt.distinct_ranks, opt.rank_speed, opt.rank_compute_slowdown);
      network.build(slots);
      slots_built = true;
      slots_distinct = opt.distinct_ranks;
      slots_speed = opt.rank_speed;
      slots_compute_slowdown = opt.rank_compute_slowdown;
    }
    network.clear();
    result = StepResult{};
    result.num_simulated_ranks = slots.num_slots();
    const auto n = static_cast<size_t>(slots.num_slots());
    slot_end.assign(n, 0);

    // Per-slot arrays keep their capacity from run to run (sampled steps of one graph): resized
    // here, refilled below.
    remaining.resize(n);
    queue_start.assign(n, {});
    ended.resize(n);
    comm_in_flight.assign(n, 0);
    host.assign(n, HostState{});
    memory.resize(n);
    busy.assign(n, {});
    events.clear();
    rendezvous.clear();
    routed_bytes.clear();
    // The ledgers' tracks stay from run to run of this graph: a rank whose effects a track's log
    // already holds only compares them (slab_tracks.hpp), so a sampled step that orders its
    // allocations as an earlier step did places nothing again. Forgotten when too many forked.
    if (slab_tracks.num_tracks() > kMaxKeptSlabTracks) slab_tracks.reset();
    for (int32_t s = 0; s < slots.num_slots(); ++s) {
      const Program& p = program_of(s);
      memory[static_cast<size_t>(s)].share(&slab_tracks);
      memory[static_cast<size_t>(s)].reset(p.persistent.total(), p.persistent.host_total());
      remaining[static_cast<size_t>(s)] = index[static_cast<size_t>(p.stage)].num_preds;
      ended[static_cast<size_t>(s)].assign(p.ops.size(), 0);
    }
  }

  StepResult finish_run() {
    const RunRecord record = run_record();
    if (const std::string stuck = deadlock_report(record); !stuck.empty()) {
      throw SimulationError("the step did not complete: " + stuck);
    }
    std::vector<RankMemory> slot_memory;
    for (RankMemoryLedger& m : memory) slot_memory.push_back(m.finish(g.allocator_fragmentation));
    if (opt.record_timeline) {
      // The allocator places an instant's tensors once the instant is complete: a last sample
      // at the end carries the reserve the report shows as the peak.
      for (int32_t s = 0; s < slots.num_slots(); ++s) {
        if (slots.rank_of(s) >= opt.record_memory_ranks) continue;
        const RankMemory& m = slot_memory[static_cast<size_t>(s)];
        result.timeline.memory.push_back(MemorySample{slots.rank_of(s), slot_end[static_cast<size_t>(s)],
                                                      m.final_hbm_bytes, memory[static_cast<size_t>(s)].ddr_bytes(),
                                                      m.peak_hbm_bytes});
      }
    }
    // Every rank gets its slot's results.
    result.rank_end.resize(static_cast<size_t>(num_ranks));
    result.memory.resize(static_cast<size_t>(num_ranks));
    for (int64_t r = 0; r < num_ranks; ++r) {
      result.rank_end[static_cast<size_t>(r)] = slot_end[static_cast<size_t>(slots.slot_of(r))];
      result.memory[static_cast<size_t>(r)] = slot_memory[static_cast<size_t>(slots.slot_of(r))];
    }
    // The breakdown is the rank that ends the step; of several, the lowest-numbered.
    int32_t slowest = 0;
    for (int32_t s = 1; s < slots.num_slots(); ++s) {
      const Picoseconds end = slot_end[static_cast<size_t>(s)], best = slot_end[static_cast<size_t>(slowest)];
      if (end > best || (end == best && slots.rank_of(s) < slots.rank_of(slowest))) slowest = s;
    }
    result.slowest_rank = slots.rank_of(slowest);
    result.slowest_rank_compute_slowdown = compute_slowdown_of(slowest);
    result.step_time = slot_end[static_cast<size_t>(slowest)];
    result.ep_load_imbalance = loads.load_imbalance();
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

  RunRecord run_record() const {
    RunRecord r;
    r.plan = &g.plan;
    r.slot_rank = slots.slot_rank();
    for (int32_t s = 0; s < slots.num_slots(); ++s) {
      r.program.push_back(&program_of(s));
      r.index.push_back(&index[static_cast<size_t>(program_of(s).stage)]);
    }
    r.ended = &ended;
    r.remaining = &remaining;
    r.slot_end = &slot_end;
    for (int32_t s = 0; s < slots.num_slots(); ++s) {
      r.issue_at.push_back(&issue_at[program_index(s)]);
      r.host_delays.push_back(&host[static_cast<size_t>(s)].delays);
    }
    r.group_slots = [this](int32_t slot, GroupKind kind) {
      std::vector<int32_t> out;
      slots.for_each_group_slot(slot, kind, [&](int32_t s) { out.push_back(s); });
      return out;
    };
    return r;
  }
};

Engine::Engine(const StepGraph& graph, const CostModel& cost) : impl_(std::make_unique<Impl>(graph, cost)) {}
Engine::~Engine() = default;
StepResult Engine::run(const EngineOptions& options) { return impl_->run(options); }

}  // namespace moesim
