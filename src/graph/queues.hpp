// SPDX-License-Identifier: MIT
// The queues a rank's ops run on (DESIGN.md section 4): one compute queue, one copy queue for
// swap, and one communication queue per process-group kind, so that an FSDP all-gather, an EP
// all-to-all and a swap copy overlap one another. Each queue runs its ops in program order; the
// engine simulates these queues and the executor maps each onto a CUDA stream.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "graph/op.hpp"
#include "graph/program.hpp"
#include "plan/parallel_plan.hpp"

namespace moesim {

inline constexpr int kNumQueues = 2 + kNumGroupKinds;
inline constexpr int kComputeQueue = 0;
inline constexpr int kCopyQueue = 1;

constexpr int queue_of(const Op& op) {
  if (op.stream == Stream::copy) return kCopyQueue;
  if (op.stream == Stream::comm && is_communication(op.kind)) return 2 + static_cast<int>(op.group);
  return kComputeQueue;
}

// Per queue, a count of that queue's ops (or a 1-based place on it; 0: none).
using QueueClock = std::array<int32_t, kNumQueues>;

// For each op of `p`, per queue: how many of that queue's ops end before the op starts by queue
// order and explicit dependencies, transitively (a vector clock). Op a ends before op b starts iff
// a is among the first clock[b][queue_of(a)] ops of its queue. Throws std::logic_error if an op
// depends on a later one.
std::vector<QueueClock> ordering_clocks(const Program& p);

// Each op's 1-based place on its queue.
std::vector<int32_t> queue_places(const Program& p);

}  // namespace moesim
