// SPDX-License-Identifier: MIT
// The queues a rank's ops run on: one compute queue, one copy queue for
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

// Pipeline sends and receives get four queues of their own - activations sent to the next stage,
// activations received from the previous one, gradients sent back, gradients received - so that
// each queue carries the messages of one (sender, receiver, direction) channel in the order both
// ends issue them. A rank then never waits in a send while its peer waits in a send the other way
// (what one rendezvous queue per rank does to 1F1B with 2+ micro-batches); this is what Megatron's
// batched isend/irecv pairs and PyTorch's pipelining achieve with non-blocking point-to-point.
inline constexpr int kNumPipelineQueues = 4;
inline constexpr int kNumQueues = 2 + kNumGroupKinds + kNumPipelineQueues;
inline constexpr int kComputeQueue = 0;
inline constexpr int kCopyQueue = 1;
inline constexpr int kFirstPipelineQueue = 2 + kNumGroupKinds;

constexpr bool is_pipeline_p2p(const Op& op) { return is_p2p(op.kind) && op.group == GroupKind::pp; }

constexpr int queue_of(const Op& op) {
  if (is_pipeline_p2p(op)) {  // whatever its stream: pipeline point-to-point never blocks compute
    return kFirstPipelineQueue + (op.phase == Phase::fwd ? 0 : 2) + (op.kind == OpKind::send ? 0 : 1);
  }
  if (op.stream == Stream::copy) return kCopyQueue;
  if (op.stream == Stream::comm && is_communication(op.kind)) return 2 + static_cast<int>(op.group);
  return kComputeQueue;
}

// The process group whose communicator a queue's collectives use (communication queues only).
constexpr GroupKind queue_group(int queue) {
  return queue >= kFirstPipelineQueue ? GroupKind::pp : static_cast<GroupKind>(queue - 2);
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
