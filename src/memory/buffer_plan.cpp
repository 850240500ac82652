// SPDX-License-Identifier: MIT
#include "memory/buffer_plan.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <tuple>

namespace moesim {

BufferPlan plan_buffers(const Program& p) {
  const size_t n = p.ops.size();
  BufferPlan b;
  b.alloc_at_start.resize(n);
  b.free_at_end.resize(n);
  std::vector<int64_t> holder(p.buffers.size(), -1);  // op that allocated the live HBM copy
  auto name = [&](uint32_t buf) { return "buffer '" + p.names[p.buffers[buf].name] + "'"; };
  double live = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const Op& op = p.ops[i];
    for (const MemEffect& e : p.effects_of(op)) {
      if (e.action != MemAction::alloc && e.action != MemAction::to_device) continue;
      if (holder[e.buffer] >= 0) {
        throw std::logic_error(name(e.buffer) + " allocated by op '" + p.name_of(op) + "' while already in HBM");
      }
      holder[e.buffer] = i;
      b.alloc_at_start[i].push_back(e.buffer);
      live += p.buffers[e.buffer].bytes;
    }
    if (live > b.program_order_peak_bytes) {
      b.program_order_peak_bytes = live;
      b.peak_op = i;
    }
    for (const MemEffect& e : p.effects_of(op)) {
      if (e.action != MemAction::free && e.action != MemAction::to_host) continue;
      if (holder[e.buffer] < 0) throw std::logic_error(name(e.buffer) + " freed by op '" + p.name_of(op) + "' but not in HBM");
      holder[e.buffer] = -1;
      b.free_at_end[i].push_back(e.buffer);
      live -= p.buffers[e.buffer].bytes;
    }
  }
  for (size_t buf = 0; buf < holder.size(); ++buf) {
    if (holder[buf] >= 0) {
      throw std::logic_error(name(static_cast<uint32_t>(buf)) + " allocated by op '" +
                             p.name_of(p.ops[static_cast<size_t>(holder[buf])]) + "' is never freed");
    }
  }
  return b;
}

SlabPlan plan_slab(const Program& p, std::span<const Picoseconds> starts, std::span<const Picoseconds> ends) {
  const size_t n = p.ops.size();
  if (starts.size() != n || ends.size() != n) throw std::logic_error("plan_slab: one start and one end per op");
  SlabPlan plan;
  plan.order = plan_buffers(p);  // checks balance
  const BufferPlan& order = plan.order;
  const std::vector<QueueClock> clocks = ordering_clocks(p);
  const std::vector<int32_t> place = queue_places(p);
  std::array<std::vector<uint32_t>, kNumQueues> queue_ops;  // per queue, its ops in order
  for (uint32_t i = 0; i < n; ++i) queue_ops[static_cast<size_t>(queue_of(p.ops[i]))].push_back(i);
  // Events in time order; at one instant in program order (an op can reuse only memory that ops
  // issued before it released), and an op's allocations before its own releases.
  struct Event {
    Picoseconds time;
    uint32_t op;
    int release;  // 0: the allocations at the op's start, 1: the releases at its end
  };
  std::vector<Event> events;
  for (uint32_t i = 0; i < n; ++i) {
    if (!order.alloc_at_start[i].empty()) events.push_back({starts[i], i, 0});
    if (!order.free_at_end[i].empty()) events.push_back({ends[i], i, 1});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.time, a.op, a.release) < std::tie(b.time, b.op, b.release);
  });
  plan.waits.resize(n);
  plan.offsets.resize(n);
  PlacementFrontier frontier;
  frontier.reset(p);
  SlabAllocator slab;
  slab.follow(&frontier);
  std::vector<SlabAllocator::Handle> block(p.buffers.size(), 0);
  for (const Event& e : events) {
    const int q = queue_of(p.ops[e.op]);
    if (e.release == 1) {
      for (uint32_t b : order.free_at_end[e.op]) slab.release(block[b], e.op, q, place[e.op]);
      continue;
    }
    for (uint32_t b : order.alloc_at_start[e.op]) {
      const SlabAllocator::Placement at = slab.place(slab_block_bytes(p.buffers[b].bytes), e.op);
      block[b] = at.block;
      plan.offsets[e.op].push_back(at.offset);
      for (int k = 0; k < kNumQueues; ++k) {
        const int32_t released = at.reuses[static_cast<size_t>(k)];
        if (k == q || released <= clocks[e.op][static_cast<size_t>(k)]) continue;  // already ordered before
        const uint32_t by = queue_ops[static_cast<size_t>(k)][static_cast<size_t>(released - 1)];
        auto& w = plan.waits[e.op];
        if (std::find(w.begin(), w.end(), by) == w.end()) w.push_back(by);
      }
    }
    frontier.placed(e.op);
  }
  plan.slab_bytes = slab.high_water();
  return plan;
}

}  // namespace moesim
