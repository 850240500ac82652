// SPDX-License-Identifier: MIT
#include "memory/rank_memory.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moesim {

RankMemoryLedger::RankMemoryLedger(double persistent) : hbm_(persistent) {
  m_.persistent_bytes = persistent;
  m_.peak_hbm_bytes = persistent;
  m_.min_hbm_bytes = persistent;
}

void RankMemoryLedger::apply(const Program& p, const Op& op, uint32_t op_index, bool at_start, Picoseconds t) {
  bool moves_hbm = false;
  for (const MemEffect& e : p.effects_of(op)) {
    const Buffer& b = p.buffers[e.buffer];
    double dh = 0;  // the HBM change of this effect now
    switch (e.action) {
      case MemAction::alloc: dh = at_start ? b.bytes : 0; break;
      case MemAction::free: dh = at_start ? 0 : -b.bytes; break;
      case MemAction::to_host:
        if (at_start) {
          ddr_ += b.bytes;
        } else {
          dh = -b.bytes;
        }
        break;
      case MemAction::to_device:
        if (at_start) {
          dh = b.bytes;
        } else {
          ddr_ -= b.bytes;
        }
        break;
    }
    hbm_ += dh;
    live_[static_cast<size_t>(b.category)] += dh;
    moves_hbm = moves_hbm || dh != 0;
  }
  if (moves_hbm) {
    if (!pending_.empty() && t != pending_time_) place_pending();
    pending_.push_back({&p, op_index, at_start});
    pending_time_ = t;
  }
  if (hbm_ > m_.peak_hbm_bytes) {
    m_.peak_hbm_bytes = hbm_;
    m_.peak_transient = live_;
    m_.peak_time = t;
    m_.peak_op = op_index;
  }
  m_.peak_ddr_bytes = std::max(m_.peak_ddr_bytes, ddr_);
  m_.min_hbm_bytes = std::min(m_.min_hbm_bytes, hbm_);
}

void RankMemoryLedger::place_pending() {
  // One instant's effects in program order, an op's allocations before its releases: what
  // plan_slab does with a timeline, so the engine's slab is plan_slab's on the engine's times.
  if (pending_.size() > 1) {
    std::sort(pending_.begin(), pending_.end(), [](const Pending& a, const Pending& b) {
      return a.op != b.op ? a.op < b.op : a.at_start > b.at_start;
    });
  }
  for (const Pending& x : pending_) {
    const Program& p = *x.program;
    const Op& op = p.ops[x.op];
    if (block_.size() < p.buffers.size()) block_.resize(p.buffers.size(), kNotPlaced);
    for (const MemEffect& e : p.effects_of(op)) {
      const Buffer& b = p.buffers[e.buffer];
      const bool takes = e.action == MemAction::alloc || e.action == MemAction::to_device;
      const bool gives = e.action == MemAction::free || e.action == MemAction::to_host;
      if (b.bytes <= 0 || !(x.at_start ? takes : gives)) continue;
      if (x.at_start) {
        if (block_[e.buffer] != kNotPlaced) {
          throw std::logic_error("buffer '" + p.names[b.name] + "' placed again by op '" + p.name_of(op) + "'");
        }
        block_[e.buffer] = slab_.place(slab_block_bytes(b.bytes), x.op).block;
      } else {
        if (block_[e.buffer] == kNotPlaced) {
          throw std::logic_error("buffer '" + p.names[b.name] + "' released by op '" + p.name_of(op) + "' but not placed");
        }
        slab_.release(block_[e.buffer], x.op, -1, 0);  // the engine needs no waits
        block_[e.buffer] = kNotPlaced;
      }
    }
  }
  pending_.clear();
}

RankMemory RankMemoryLedger::finish(double fragmentation) {
  place_pending();
  RankMemory m = m_;
  m.final_hbm_bytes = hbm_;
  m.slab_bytes = static_cast<double>(slab_.high_water());
  const double transient_at_peak = m.peak_hbm_bytes - m.persistent_bytes;
  m.allocator_reserve_bytes = std::max(0.0, m.slab_bytes - transient_at_peak) + fragmentation * m.slab_bytes;
  m.peak_hbm_bytes += m.allocator_reserve_bytes;
  return m;
}

}  // namespace moesim
