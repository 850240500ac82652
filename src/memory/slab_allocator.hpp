// SPDX-License-Identifier: MIT
// Places a rank's transient tensors in one device slab as they are allocated and released in time
// order: best fit (the smallest free block that holds the request, the lowest offset on ties),
// released neighbours coalesced, and the slab grown at its top when no free block fits (a free
// block at the top is extended rather than left behind). The slab's high water is the memory an
// allocator of this kind needs for the step: the live tensors at their peak plus what placement
// leaves in holes.
//
// Ops are numbered in program order, the order a host issues them. A placement for op i reuses
// only memory released by ops before i in that order (a host cannot wait for work it has not
// issued yet), and a block released on one queue and reused by an op of another is safe only if
// that op waits for the release: each placement says, per queue, the latest releasing op of the
// memory it reuses, so a caller can order the reuse (the executor turns it into a CUDA event wait).
//
// Blocks live in a pool of nodes linked in offset order (coalescing is O(1)). Best fit scans the
// free ones, which are kept in one array with what the fit compares (size, offset, latest
// release) copied beside each block's id: the scan reads contiguous memory instead of chasing
// nodes across the pool, and taking or freeing a block is O(1) (swap with the last entry).
#pragma once

#include <cstdint>
#include <vector>

#include "graph/queues.hpp"

namespace moesim {

inline constexpr uint64_t kSlabAlignment = 512;  // block sizes are rounded up to this
uint64_t slab_block_bytes(double bytes);         // the block a request of `bytes` takes

class SlabAllocator {
 public:
  using Handle = uint32_t;  // a placed block, for release
  struct Placement {
    Handle block = 0;
    uint64_t offset = 0;
    QueueClock reuses{};  // per queue, the latest op whose release this block's memory comes from
  };

  // `track_reuse`: keep per block which releases its memory comes from (Placement::reuses);
  // without it `reuses` stays empty and the blocks are smaller (the engine's many ranks).
  explicit SlabAllocator(bool track_reuse = true) : track_(track_reuse) {}

  // Forgets every block (as a fresh allocator), keeping the pool's capacity.
  void reset();

  // Places a block of `bytes` (a multiple of kSlabAlignment, > 0) for op `op`.
  Placement place(uint64_t bytes, uint32_t op);
  // Releases a placed block, by op `op`, which is at 1-based place `place` of `queue` (queue -1:
  // no history kept).
  void release(Handle block, uint32_t op, int queue, int32_t place);

  uint64_t high_water() const { return high_; }
  uint64_t live_bytes() const { return live_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint32_t prev = kNone, next = kNone;  // neighbours in offset order
    uint32_t free_slot = kNone;           // index in free_ while free
    bool live = false;
    int64_t last_release_op = -1;         // the latest op (program order) whose release this memory holds
  };

  uint32_t new_node();
  void drop_node(uint32_t id);
  void mark_free(uint32_t id);
  void unmark_free(uint32_t id);
  void absorb_next(uint32_t id);  // merges the (free) next node into the (free) node `id`

  // A free block as the fit sees it: its node's fields, copied while the block is free (a free
  // block's node does not change until it leaves free_).
  struct FreeBlock {
    uint64_t size;
    uint64_t offset;
    int64_t last_release_op;
    uint32_t id;
  };

  bool track_;
  std::vector<Node> nodes_;
  std::vector<QueueClock> released_;  // per node when tracking: per queue, the latest release its memory holds
  std::vector<uint32_t> spare_;  // unused node ids
  std::vector<FreeBlock> free_;  // the free blocks, in no order
  uint32_t last_ = kNone;        // the block at the top
  uint64_t top_ = 0;
  uint64_t high_ = 0;
  uint64_t live_ = 0;
};

}  // namespace moesim
