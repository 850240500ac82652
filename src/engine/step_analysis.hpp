// SPDX-License-Identifier: MIT
// Analyses of a finished simulation, reading only when each op of each simulated rank ended (its
// start follows from its predecessors' ends, start_of): where the slowest rank's time went by op name, the critical path, what held its
// compute stream when it was not computing (exposed time by cause), and - when a step did not
// finish - a deadlock report naming where each stuck rank waits.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "engine/program_index.hpp"
#include "graph/timeline.hpp"
#include "plan/parallel_plan.hpp"

namespace moesim {

// An op's entry in the engine's per-slot `remaining`: while it waits, how many of its
// predecessors (queue predecessor and explicit dependencies) are not done; then these.
inline constexpr int32_t kOpRunning = -1;
inline constexpr int32_t kOpDone = -2;

// How late the host issued ops after waiting for the GPU: (first op, delay) pairs in program
// order, the first (0, 0); op i was issued at issue_at[i] + the delay of the last pair at or before i.
using HostDelays = std::vector<std::pair<uint32_t, Picoseconds>>;

// A run as the analyses read it; every vector is per simulated slot (a rank, or one representative
// per class of interchangeable ranks), the engine's own state borrowed.
struct RunRecord {
  const ParallelPlan* plan = nullptr;
  std::vector<int32_t> slot_rank;              // the rank each slot simulates
  std::vector<const Program*> program;
  std::vector<const ProgramIndex*> index;
  const std::vector<std::vector<Picoseconds>>* ended = nullptr;     // per slot, per op
  const std::vector<std::vector<int32_t>>* remaining = nullptr;     // per slot, per op (kOpDone, ...)
  const std::vector<Picoseconds>* slot_end = nullptr;  // when each slot's last op ended
  // When the host would issue each op if it never waited (per slot, per op; all 0 when the host
  // costs nothing): the engine's host_issue_times, from StepGraph::host_op_issue_s and
  // host_kernel_issue_s; and per slot how much later it did after waiting for the GPU.
  std::vector<const std::vector<Picoseconds>*> issue_at;
  std::vector<const HostDelays*> host_delays;
  // The slots standing for `slot`'s group of `kind` (its members, or their classes).
  std::function<std::vector<int32_t>(int32_t slot, GroupKind kind)> group_slots;
};

using TimeByName = std::vector<std::pair<std::string, Picoseconds>>;

// When the host issued op `i` of `slot`: issue_at, delayed by its waits for the GPU.
Picoseconds issued_at(const RunRecord& run, int32_t slot, uint32_t i);

// When op `i` of `slot` started, in a run where it ran: the engine starts an op at the latest of
// its queue predecessor's end, its explicit dependencies' ends and its issue by the host (0 for
// an op without predecessors), so this is exact; a collective's start is its arrival.
Picoseconds start_of(const RunRecord& run, int32_t slot, uint32_t i);

// Time of `slot`'s ops by folded name, the largest `keep` first.
TimeByName time_by_op(const RunRecord& run, int32_t slot, size_t keep);

// Walks back from the op that ends `slot`'s step: each op's start was set by the predecessor
// that ended last (its queue predecessor or an explicit dependency); a collective's start by the
// member that arrived last, possibly on another rank. The chain's time by op name (the largest
// `keep`) and its length in ops.
std::pair<TimeByName, int64_t> critical_path(const RunRecord& run, int32_t slot, size_t keep);

// What held the compute stream of `slot` whenever it was not running a compute kernel: before
// each op of the compute queue, the gap since the previous one is charged to the dependency that
// ended last (the one it waited for: a collective's kind, "pipeline_bubble", "swap",
// "data_parallel" for FSDP2's copies on its streams), and what remains of it after that to "host" when the op
// waited for the host to issue it; a collective running on the compute queue itself (no
// comm/compute overlap) is charged to its kind; the tail after the last compute-queue op to the
// op that ended the step. Returns the time computing and the rest by cause; they add up to the
// slot's end.
std::pair<Picoseconds, TimeByName> exposed_time(const RunRecord& run, int32_t slot);

// Empty when every op of every slot ran; otherwise names, for the first few stuck ranks, the op
// each of their queues is blocked on and what that op waits for.
std::string deadlock_report(const RunRecord& run);

}  // namespace moesim
