// SPDX-License-Identifier: MIT
// Places a rank's transient tensors in one device slab as they are allocated and released in time
// order: best fit (the smallest free piece, else extent, that holds the request, the lowest offset
// on ties), and the slab grown at its top when nothing fits (a free extent at the top is extended
// rather than left behind). The slab's high water is the memory an allocator of this kind needs
// for the step: the live tensors at their peak plus what placement leaves in holes.
//
// Ops are numbered in program order, the order a host issues them. A placement for op i reuses
// only memory released by ops before i in that order (a host cannot wait for work it has not
// issued yet), and a block released on one queue and reused by an op of another is safe only if
// that op waits for the release: each placement says, per queue, the latest releasing op of the
// memory it reuses, so a caller can order the reuse (the executor turns it into a CUDA event wait).
//
// Free memory is kept as pieces, each with the op that released it; neighbours released by one
// op are one piece. For op i a free extent is a maximal run of adjacent pieces all released
// before i. Merging neighbours on release regardless (one block, its latest release) would hide
// memory an earlier-issued op may reuse: when a queue runs ahead of the host's issue order (an
// expert all-to-all in chunks), one late-issued release would make its whole hole unusable to
// the ops behind it, and the slab would grow layer after layer.
//
// Nodes live in a pool, linked in offset order. The free pieces are kept in one array sorted by
// (size, offset), with what the fit compares (size, offset, latest release) copied beside each
// piece's id: best fit is the first piece at or after the request's size that the op may reuse
// (a binary search, then usually a step or two), where a scan of every free piece took 11% of a
// sweep. Only when no single piece holds a request does it walk the extents. Taking or freeing a
// piece is a binary search and a move of the entries after it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "graph/queues.hpp"
#include "memory/placement_frontier.hpp"

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

  // The ops still to place, kept by the caller as it places (nullptr: any op may come, so only
  // neighbours released by one op are merged).
  void follow(PlacementFrontier* frontier) { frontier_ = frontier; }

  uint64_t high_water() const { return high_; }
  uint64_t live_bytes() const { return live_; }

 private:
  static constexpr uint32_t kNone = UINT32_MAX;
  struct Node {
    uint64_t offset = 0;
    uint64_t size = 0;
    uint32_t prev = kNone, next = kNone;  // neighbours in offset order
    bool listed = false;                  // in free_ (a free piece the fit may take)
    bool live = false;
    int64_t last_release_op = -1;         // the latest op (program order) whose release this memory holds
  };

  // A block taken from a free extent, and the release history its unused rest keeps.
  struct Taken {
    uint32_t block;
    int64_t rest_release_op;
    QueueClock rest_released;
  };
  bool reusable(uint32_t id, uint32_t op) const;  // a free piece released by an op issued before `op`
  bool mergeable(uint32_t a, uint32_t b) const;   // free neighbours no op still to place tells apart
  Taken take_extent(uint32_t start, uint64_t bytes);
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
  static bool fits_before(const FreeBlock& a, const FreeBlock& b) {
    return a.size != b.size ? a.size < b.size : a.offset < b.offset;
  }

  bool track_;
  std::vector<Node> nodes_;
  std::vector<QueueClock> released_;  // per node when tracking: per queue, the latest release its memory holds
  std::vector<uint32_t> spare_;  // unused node ids
  std::vector<FreeBlock> free_;  // the free blocks, by (size, offset): fits_before
  uint32_t last_ = kNone;        // the block at the top
  uint64_t top_ = 0;
  uint64_t high_ = 0;
  uint64_t live_ = 0;
  PlacementFrontier* frontier_ = nullptr;
  std::vector<uint32_t> compact_;  // extents to merge after a scan (place)
};

// The fit's small predicates, inline: place() calls them per free piece.
inline bool SlabAllocator::reusable(uint32_t id, uint32_t op) const {
  return id != kNone && !nodes_[id].live && nodes_[id].last_release_op < static_cast<int64_t>(op);
}
inline bool SlabAllocator::mergeable(uint32_t a, uint32_t b) const {
  // Two free neighbours become one piece when no op still to place tells them apart: released by
  // the same op, or no op issued after the earlier release and up to the later one is to come.
  if (a == kNone || b == kNone || nodes_[a].live || nodes_[b].live) return false;
  const int64_t ra = nodes_[a].last_release_op, rb = nodes_[b].last_release_op;
  if (ra == rb) return true;
  if (frontier_ == nullptr) return false;
  return !frontier_->to_place_between(static_cast<uint32_t>(std::min(ra, rb)), static_cast<uint32_t>(std::max(ra, rb)));
}

}  // namespace moesim
