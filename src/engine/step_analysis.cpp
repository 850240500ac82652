// SPDX-License-Identifier: MIT
#include "engine/step_analysis.hpp"

#include <algorithm>
#include <array>
#include <map>

#include "graph/queues.hpp"

namespace moesim {
namespace {

const std::vector<Picoseconds>& ends(const RunRecord& run, int32_t slot) { return (*run.ended)[static_cast<size_t>(slot)]; }

std::string queue_name(int q) {
  if (q == kComputeQueue) return "compute";
  if (q == kCopyQueue) return "copy";
  if (q >= kFirstPipelineQueue) {
    static constexpr std::array<const char*, 3> carries{"activations", "gradients", "mirror-stage gradients"};
    const int k = q - kFirstPipelineQueue;
    return std::string("pp ") + (k % 2 == 0 ? "send " : "receive ") + carries[static_cast<size_t>(k / 4)] +
           (k % 4 >= 2 ? " (peer on a lower stage)" : " (peer on a higher stage)");
  }
  return std::string(enum_name(queue_group(q))) + " communication";
}

// Why op `i` of `slot`, the first unfinished op of its queue, has not finished.
std::string blocked_on(const RunRecord& run, int32_t slot, uint32_t i) {
  const Program& p = *run.program[static_cast<size_t>(slot)];
  const auto& state = (*run.remaining)[static_cast<size_t>(slot)];
  const Op& op = p.ops[i];
  if (state[i] == kOpRunning) {
    if (is_p2p(op.kind)) {
      const int64_t rank = run.slot_rank[static_cast<size_t>(slot)];
      const int64_t peer = run.plan->member(rank, op.group, run.plan->group_rank(rank, op.group) + op.peer_offset);
      return std::string("waits for rank ") + std::to_string(peer) + " to post the matching " +
             (op.kind == OpKind::send ? "receive" : "send");
    }
    if (is_collective(op.kind)) {
      return "waits for the other members of its " + std::string(enum_name(op.group)) + " group (" +
             std::to_string(run.plan->group_size(op.group)) + " ranks) to reach it";
    }
    return "started and never ended";
  }
  std::vector<std::string> pending;
  auto add = [&](int64_t d) {
    if (d >= 0 && state[static_cast<size_t>(d)] != kOpDone) pending.push_back("'" + p.name_of(p.ops[static_cast<size_t>(d)]) + "'");
  };
  add(run.index[static_cast<size_t>(slot)]->queue_pred[i]);
  for (uint32_t d : p.deps_of(op)) add(d);
  std::string out = "waits for";
  for (size_t k = 0; k < pending.size(); ++k) out += (k == 0 ? " " : ", ") + pending[k];
  return out;
}

}  // namespace

Picoseconds issued_at(const RunRecord& run, int32_t slot, uint32_t i) {
  const HostDelays& delays = *run.host_delays[static_cast<size_t>(slot)];
  const auto after = std::upper_bound(delays.begin(), delays.end(), i,
                                      [](uint32_t op, const auto& d) { return op < d.first; });
  return (*run.issue_at[static_cast<size_t>(slot)])[i] + std::prev(after)->second;
}

Picoseconds start_of(const RunRecord& run, int32_t slot, uint32_t i) {
  const Program& p = *run.program[static_cast<size_t>(slot)];
  const auto& en = ends(run, slot);
  Picoseconds start = issued_at(run, slot, i);
  const int32_t before = run.index[static_cast<size_t>(slot)]->queue_pred[i];
  if (before >= 0) start = std::max(start, en[static_cast<size_t>(before)]);
  for (uint32_t d : p.deps_of(p.ops[i])) start = std::max(start, en[d]);
  return start;
}

TimeByName time_by_op(const RunRecord& run, int32_t slot, size_t keep) {
  const Program& p = *run.program[static_cast<size_t>(slot)];
  const ProgramIndex& ix = *run.index[static_cast<size_t>(slot)];
  const auto& en = ends(run, slot);
  std::vector<Picoseconds> by_name(ix.folded_names.size(), 0);
  for (uint32_t i = 0; i < p.ops.size(); ++i) by_name[static_cast<size_t>(ix.folded[i])] += en[i] - start_of(run, slot, i);
  return ranked(ix, by_name, keep);
}

std::pair<TimeByName, int64_t> critical_path(const RunRecord& run, int32_t slot, size_t keep) {
  const Program* p = run.program[static_cast<size_t>(slot)];
  const ProgramIndex& ix = *run.index[static_cast<size_t>(slot)];
  int64_t op = -1;
  for (uint32_t i = 0; i < p->ops.size(); ++i) {
    if (op < 0 || ends(run, slot)[i] > ends(run, slot)[static_cast<size_t>(op)]) op = i;
  }
  std::vector<Picoseconds> by_name(ix.folded_names.size(), 0);
  int64_t length = 0;
  while (op >= 0) {
    const auto i = static_cast<uint32_t>(op);
    const Op& o = p->ops[i];
    Picoseconds latest = start_of(run, slot, i);
    by_name[static_cast<size_t>(ix.folded[i])] += ends(run, slot)[i] - latest;
    ++length;
    if (is_collective(o.kind)) {
      // The member that arrived last held the collective back.
      const int32_t here = slot;
      for (int32_t member : run.group_slots(here, o.group)) {
        if (run.program[static_cast<size_t>(member)] != run.program[static_cast<size_t>(here)]) continue;
        const Picoseconds arrived = start_of(run, member, i);
        if (arrived > latest) {
          slot = member;
          latest = arrived;
        }
      }
    }
    const auto& en = ends(run, slot);
    int64_t best = ix.queue_pred[i];
    for (uint32_t d : p->deps_of(p->ops[i])) {
      if (best < 0 || en[d] > en[static_cast<size_t>(best)]) best = d;
    }
    op = best;
  }
  return {ranked(ix, by_name, keep), length};
}

std::pair<Picoseconds, TimeByName> exposed_time(const RunRecord& run, int32_t slot) {
  const Program& p = *run.program[static_cast<size_t>(slot)];
  const auto& en = ends(run, slot);
  std::map<std::string, Picoseconds> by_cause;
  Picoseconds computing = 0;
  auto cause_of = [&](const Op& op) -> std::string {
    if (is_p2p(op.kind)) return "pipeline_bubble";
    if (is_communication(op.kind)) return std::string(enum_name(op.kind));
    if (op.stream == Stream::copy || op.kind == OpKind::swap_in || op.kind == OpKind::swap_out) return "swap";
    // FSDP2's copies on its all-gather and reduce-scatter streams (dp_copies.hpp).
    if (op.kind == OpKind::dp_copy || op.kind == OpKind::grad_accumulate) return "data_parallel";
    return "other";
  };
  Picoseconds cursor = 0;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    if (queue_of(op) != kComputeQueue) continue;
    const Picoseconds started = start_of(run, slot, i);
    if (started > cursor) {
      int64_t blocker = -1;
      for (uint32_t d : p.deps_of(op)) {
        if (blocker < 0 || en[d] > en[static_cast<size_t>(blocker)]) blocker = d;
      }
      // An op the host issued after its dependencies were done started at its issue.
      const Picoseconds issued = issued_at(run, slot, i);
      const Picoseconds done = std::max(cursor, blocker < 0 ? cursor : en[static_cast<size_t>(blocker)]);
      const Picoseconds host_wait = started == issued && issued > done ? issued - done : 0;
      const Picoseconds waited = started - cursor - host_wait;
      if (waited > 0) by_cause[blocker < 0 ? "other" : cause_of(p.ops[static_cast<size_t>(blocker)])] += waited;
      if (host_wait > 0) by_cause["host"] += host_wait;
    }
    if (is_communication(op.kind)) {
      by_cause[cause_of(op)] += en[i] - started;
    } else {
      computing += en[i] - started;
    }
    cursor = std::max(cursor, en[i]);
  }
  const Picoseconds end = (*run.slot_end)[static_cast<size_t>(slot)];
  if (end > cursor) {
    uint32_t last = 0;
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      if (en[i] > en[last]) last = i;
    }
    by_cause[cause_of(p.ops[last])] += end - cursor;
  }
  return {computing, TimeByName(by_cause.begin(), by_cause.end())};
}

std::string deadlock_report(const RunRecord& run) {
  std::string report;
  int64_t stuck = 0;
  const auto num_slots = static_cast<int32_t>(run.program.size());
  for (int32_t slot = 0; slot < num_slots; ++slot) {
    const Program& p = *run.program[static_cast<size_t>(slot)];
    const auto& state = (*run.remaining)[static_cast<size_t>(slot)];
    const auto done = static_cast<size_t>(std::count(state.begin(), state.end(), kOpDone));
    if (done == p.ops.size()) continue;
    if (++stuck > 4) continue;  // the first few ranks say enough; the count says the rest
    report += "\n  rank " + std::to_string(run.slot_rank[static_cast<size_t>(slot)]) + " (stage " +
              std::to_string(p.stage) + "): " + std::to_string(done) + " of " + std::to_string(p.ops.size()) + " ops ran";
    std::array<bool, kNumQueues> shown{};
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      const int q = queue_of(p.ops[i]);
      if (shown[static_cast<size_t>(q)] || state[i] == kOpDone) continue;
      shown[static_cast<size_t>(q)] = true;
      report += "\n    queue " + queue_name(q) + ": '" + p.name_of(p.ops[i]) + "' " + blocked_on(run, slot, i);
    }
  }
  if (stuck == 0) return {};
  return std::to_string(stuck) + " of " + std::to_string(num_slots) +
         " simulated ranks have ops that never ran (a deadlock in their programs)" + report;
}

}  // namespace moesim
