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
  n.listed = true;
  const FreeBlock f{n.size, n.offset, n.last_release_op, id};
  free_.insert(std::lower_bound(free_.begin(), free_.end(), f, fits_before), f);
}

void SlabAllocator::unmark_free(uint32_t id) {
  Node& n = nodes_[id];
  const FreeBlock key{n.size, n.offset, 0, id};
  const auto it = std::lower_bound(free_.begin(), free_.end(), key, fits_before);
  if (it == free_.end() || it->id != id) throw std::logic_error("SlabAllocator: a free piece is not listed");
  free_.erase(it);
  n.listed = false;
}

void SlabAllocator::absorb_next(uint32_t id) {
  // A listed piece is found by its size: it leaves the list while it grows and comes back.
  const bool listed = nodes_[id].listed;
  if (listed) unmark_free(id);
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
  if (listed) mark_free(id);
}

SlabAllocator::Taken SlabAllocator::take_extent(uint32_t start, uint64_t bytes) {
  // Absorbs the pieces after `start` until the block holds `bytes` (at the top: until the slab
  // ends). What is left over lies in the last piece taken, so it keeps that piece's release.
  unmark_free(start);
  Taken t{start, nodes_[start].last_release_op, track_ ? released_[start] : QueueClock{}};
  while (nodes_[start].size < bytes && nodes_[start].next != kNone) {
    const uint32_t next = nodes_[start].next;
    t.rest_release_op = nodes_[next].last_release_op;
    if (track_) t.rest_released = released_[next];
    unmark_free(next);
    absorb_next(start);
  }
  return t;
}

SlabAllocator::Placement SlabAllocator::place(uint64_t bytes, uint32_t op) {
  if (bytes == 0 || bytes % kSlabAlignment != 0) throw std::logic_error("SlabAllocator: unaligned request");
  // Best fit among the free memory this op may reuse (released by ops issued before it): the
  // smallest that holds the request, the lowest offset among equals. First among single pieces,
  // then, if none holds it, among extents - maximal runs of adjacent reusable pieces - so that a
  // piece released by an op issued later only breaks an extent instead of hiding it.
  uint32_t best = kNone;
  uint64_t best_size = 0, best_offset = 0;
  // free_ is sorted by (size, offset): the first reusable piece from the request's size on.
  const auto first = std::lower_bound(free_.begin(), free_.end(), FreeBlock{bytes, 0, 0, 0}, fits_before);
  for (auto it = first; it != free_.end(); ++it) {
    if (it->last_release_op < static_cast<int64_t>(op)) {
      best = it->id;
      break;
    }
  }
  if (best == kNone) {
    compact_.clear();
    for (const FreeBlock& f : free_) {
      if (f.last_release_op >= static_cast<int64_t>(op) || reusable(nodes_[f.id].prev, op)) continue;
      uint64_t size = f.size;
      bool compactable = false;
      for (uint32_t m = f.id, n = nodes_[m].next; reusable(n, op); m = n, n = nodes_[n].next) {
        size += nodes_[n].size;
        compactable = compactable || mergeable(m, n);
      }
      if (compactable) compact_.push_back(f.id);
      if (size < bytes) continue;
      if (best == kNone || size < best_size || (size == best_size && f.offset < best_offset)) {
        best = f.id;
        best_size = size;
        best_offset = f.offset;
      }
    }
    // Pieces no op still to place tells apart merge now (extents, and so this fit, are unchanged).
    for (const uint32_t start : compact_) {
      for (uint32_t m = start; reusable(m, op); m = nodes_[m].next) {
        while (mergeable(m, nodes_[m].next)) {
          unmark_free(nodes_[m].next);
          absorb_next(m);
        }
      }
    }
  }
  Taken t{kNone, -1, QueueClock{}};
  if (best != kNone) {
    t = take_extent(best, bytes);
  } else if (reusable(last_, op)) {
    // The extent at the top is free but too small: extend it.
    uint32_t start = last_;
    while (reusable(nodes_[start].prev, op)) start = nodes_[start].prev;
    t = take_extent(start, bytes);
    nodes_[t.block].size = bytes;
    top_ = nodes_[t.block].offset + bytes;
  } else {
    t.block = new_node();
    Node& n = nodes_[t.block];
    n.offset = top_;
    n.size = bytes;
    n.prev = last_;
    if (last_ != kNone) nodes_[last_].next = t.block;
    last_ = t.block;
    top_ += bytes;
  }
  const uint32_t id = t.block;
  Placement out;
  out.block = id;
  out.offset = nodes_[id].offset;
  if (track_) out.reuses = released_[id];
  if (nodes_[id].size > bytes) {
    // The rest stays free and keeps the release history of the piece it lies in.
    const uint32_t rid = new_node();
    Node& n = nodes_[id];  // after new_node: the pool may have grown
    Node& r = nodes_[rid];
    r.offset = n.offset + bytes;
    r.size = n.size - bytes;
    if (track_) released_[rid] = t.rest_released;
    r.last_release_op = t.rest_release_op;
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
  if (mergeable(id, n.next)) {
    unmark_free(n.next);
    absorb_next(id);
  }
  if (const uint32_t prev = nodes_[id].prev; mergeable(prev, id)) {
    unmark_free(prev);
    absorb_next(prev);
    id = prev;
  }
  mark_free(id);
}

}  // namespace moesim
