// SPDX-License-Identifier: MIT
// When and where a rank's transient buffers live in HBM.
//
// A buffer is allocated at the start of an op (alloc, to_device) and released at the end of one
// (free, to_host). plan_buffers lists these per op in program order - the order a host issues
// them. plan_slab places the buffers in one slab for a given timeline (when each op started and
// ended): effects in time order (at one instant in program order), through the SlabAllocator the
// engine's ledger also uses; and it lists the waits that make the placement
// safe: an op that reuses memory released by an op of another queue, which the step's own
// ordering (queue order and explicit dependencies) does not already put before it, must wait for
// that op. On the timeline it was planned from such a wait is already satisfied, so it costs
// nothing there; on another run it keeps the reuse correct.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "graph/program.hpp"
#include "memory/slab_allocator.hpp"

namespace moesim {

using Picoseconds = int64_t;

struct BufferPlan {
  std::vector<std::vector<uint32_t>> alloc_at_start;  // per op, in the order of its effects
  std::vector<std::vector<uint32_t>> free_at_end;     // per op
  // The transient HBM peak when allocations and frees happen in program order, and the op that
  // reached it.
  double program_order_peak_bytes = 0;
  uint32_t peak_op = 0;
};

// Throws std::logic_error for an unbalanced program (a buffer allocated while already in HBM,
// released while not in HBM, or still in HBM when the step ends), naming the buffer and the op.
BufferPlan plan_buffers(const Program& p);

struct SlabPlan {
  BufferPlan order;                            // the allocations and releases per op
  std::vector<std::vector<uint64_t>> offsets;  // per op, the offset of each of order.alloc_at_start[op]
  std::vector<std::vector<uint32_t>> waits;    // per op: ops it must wait for (other queues, not yet ordered before it)
  uint64_t slab_bytes = 0;                     // the placement's high water
};

// Places `p`'s buffers for op start and end times `starts`, `ends` (one per op).
SlabPlan plan_slab(const Program& p, std::span<const Picoseconds> starts, std::span<const Picoseconds> ends);

}  // namespace moesim
