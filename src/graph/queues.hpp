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

// Pipeline sends and receives get queues of their own, one per channel: what they carry
// (activations, gradients, or - DualPipe - the gradients a stage's two copies sum, sent with phase
// optimizer), sent or received, towards higher or lower stages (the sign of the peer offset).
// Each queue then carries the messages of one (sender, receiver, direction) channel in the order
// both ends issue them, and a rank never waits in a send while its peer waits in a send the other
// way (what one rendezvous queue per rank does to 1F1B with 2+ micro-batches); this is what
// Megatron's batched isend/irecv pairs and PyTorch's pipelining achieve with non-blocking
// point-to-point. The sign matters to DualPipe, whose stages send activations both ways;
// one-directional schedules (the interleaved wrap-around included) use one sign per kind on each
// stage.
inline constexpr int kNumPipelineQueues = 12;
inline constexpr int kNumQueues = 2 + kNumGroupKinds + kNumPipelineQueues;
inline constexpr int kComputeQueue = 0;
inline constexpr int kCopyQueue = 1;
inline constexpr int kFirstPipelineQueue = 2 + kNumGroupKinds;

constexpr bool is_pipeline_p2p(const Op& op) { return is_p2p(op.kind) && op.group == GroupKind::pp; }

// What a point-to-point message carries, which with its sender and receiver names its channel:
// 0 activations, 1 gradients, 2 mirror-stage gradients.
constexpr int p2p_carries(const Op& op) { return op.phase == Phase::fwd ? 0 : op.phase == Phase::optimizer ? 2 : 1; }

constexpr int queue_of(const Op& op) {
  if (is_pipeline_p2p(op)) {  // whatever its stream: pipeline point-to-point never blocks compute
    return kFirstPipelineQueue + p2p_carries(op) * 4 + (op.peer_offset < 0 ? 2 : 0) + (op.kind == OpKind::send ? 0 : 1);
  }
  if (op.stream == Stream::copy) return kCopyQueue;
  // Collectives, and the host copies CPU offload pairs with them (FSDP2 copies a parameter shard to
  // the device on its all-gather stream and a gradient shard to the host on its reduce-scatter
  // stream), run on their group's queue; so do the data-parallel wrapper's copies that FSDP2 runs
  // on those streams (the all-gather copy-in, the update of the reduced shard: dp_copies.hpp).
  const bool host_copy = op.kind == OpKind::swap_in || op.kind == OpKind::swap_out;
  const bool dp_copy = op.kind == OpKind::dp_copy || op.kind == OpKind::grad_accumulate;
  if (op.stream == Stream::comm && (is_communication(op.kind) || host_copy || dp_copy)) return 2 + static_cast<int>(op.group);
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
