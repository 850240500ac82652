// SPDX-License-Identifier: MIT
#include "memory/slab_allocator.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace moesim {

uint64_t slab_block_bytes(double bytes) {
  const auto b = static_cast<uint64_t>(std::ceil(std::max(bytes, 0.0)));
  return std::max<uint64_t>(kSlabAlignment, (b + kSlabAlignment - 1) / kSlabAlignment * kSlabAlignment);
}

void SlabAllocator::reset() {
  nodes_.clear();
  released_.clear();
  spare_.clear();
  free_.clear();
  last_ = kNone;
  top_ = 0;
  high_ = 0;
  live_ = 0;
}

uint32_t SlabAllocator::new_node() {
  if (!spare_.empty()) {
    const uint32_t id = spare_.back();
    spare_.pop_back();
    nodes_[id] = Node{};
    if (track_) released_[id] = {};
    return id;
  }
  nodes_.emplace_back();
  if (track_) released_.emplace_back();
  return static_cast<uint32_t>(nodes_.size() - 1);
}

void SlabAllocator::drop_node(uint32_t id) { spare_.push_back(id); }

void SlabAllocator::mark_free(uint32_t id) {
  Node& n = nodes_[id];
  n.free_slot = static_cast<uint32_t>(free_.size());
  free_.push_back(FreeBlock{n.size, n.offset, n.last_release_op, id});
}

void SlabAllocator::unmark_free(uint32_t id) {
  const uint32_t slot = nodes_[id].free_slot;
  free_[slot] = free_.back();
  nodes_[free_[slot].id].free_slot = slot;
  free_.pop_back();
  nodes_[id].free_slot = kNone;
}

void SlabAllocator::absorb_next(uint32_t id) {
  Node& a = nodes_[id];
  const uint32_t nid = a.next;
  const Node& b = nodes_[nid];
  if (track_) {
    for (size_t q = 0; q < released_[id].size(); ++q) released_[id][q] = std::max(released_[id][q], released_[nid][q]);
  }
  a.last_release_op = std::max(a.last_release_op, b.last_release_op);
  a.size += b.size;
  a.next = b.next;
  if (a.next != kNone) nodes_[a.next].prev = id;
  if (last_ == nid) last_ = id;
  drop_node(nid);
}

SlabAllocator::Placement SlabAllocator::place(uint64_t bytes, uint32_t op) {
  if (bytes == 0 || bytes % kSlabAlignment != 0) throw std::logic_error("SlabAllocator: unaligned request");
  // Best fit among the free blocks this op may reuse (not memory released by ops issued later):
  // the smallest that holds the request, the lowest offset among equals.
  uint32_t best = kNone;
  uint64_t best_size = 0, best_offset = 0;
  for (const FreeBlock& f : free_) {
    if (f.size < bytes || f.last_release_op >= static_cast<int64_t>(op)) continue;
    if (best == kNone || f.size < best_size || (f.size == best_size && f.offset < best_offset)) {
      best = f.id;
      best_size = f.size;
      best_offset = f.offset;
    }
  }
  uint32_t id = best;
  if (id != kNone) {
    unmark_free(id);
  } else if (last_ != kNone && !nodes_[last_].live && nodes_[last_].last_release_op < static_cast<int64_t>(op)) {
    // The top block is free but too small: extend it.
    id = last_;
    unmark_free(id);
    nodes_[id].size = bytes;
    top_ = nodes_[id].offset + bytes;
  } else {
    id = new_node();
    Node& n = nodes_[id];
    n.offset = top_;
    n.size = bytes;
    n.prev = last_;
    if (last_ != kNone) nodes_[last_].next = id;
    last_ = id;
    top_ += bytes;
  }
  Placement out;
  out.block = id;
  out.offset = nodes_[id].offset;
  if (track_) out.reuses = released_[id];
  if (nodes_[id].size > bytes) {
    // The rest stays free and keeps its release history.
    const uint32_t rid = new_node();
    Node& n = nodes_[id];  // after new_node: the pool may have grown
    Node& r = nodes_[rid];
    r.offset = n.offset + bytes;
    r.size = n.size - bytes;
    if (track_) released_[rid] = released_[id];
    r.last_release_op = n.last_release_op;
    r.prev = id;
    r.next = n.next;
    if (n.next != kNone) nodes_[n.next].prev = rid;
    n.next = rid;
    if (last_ == id) last_ = rid;
    n.size = bytes;
    mark_free(rid);
  }
  Node& n = nodes_[id];
  n.live = true;
  if (track_) released_[id] = {};
  n.last_release_op = -1;
  live_ += bytes;
  high_ = std::max(high_, top_);
  return out;
}

void SlabAllocator::release(Handle block, uint32_t op, int queue, int32_t place) {
  if (block >= nodes_.size() || !nodes_[block].live) throw std::logic_error("SlabAllocator: release of a block not placed");
  uint32_t id = block;
  Node& n = nodes_[id];
  n.live = false;
  live_ -= n.size;
  if (track_ && queue >= 0 && queue < kNumQueues) released_[id][static_cast<size_t>(queue)] = place;
  n.last_release_op = op;
  if (n.next != kNone && !nodes_[n.next].live) {
    unmark_free(n.next);
    absorb_next(id);
  }
  if (const uint32_t prev = nodes_[id].prev; prev != kNone && !nodes_[prev].live) {
    unmark_free(prev);
    absorb_next(prev);
    id = prev;
  }
  mark_free(id);
}

}  // namespace moesim
