// SPDX-License-Identifier: MIT
#include "memory/rank_memory.hpp"

#include <algorithm>

namespace moesim {

RankMemoryLedger::RankMemoryLedger(double persistent) : hbm_(persistent) {
  m_.persistent_bytes = persistent;
  m_.peak_hbm_bytes = persistent;
  m_.min_hbm_bytes = persistent;
}

void RankMemoryLedger::apply(const Program& p, const Op& op, uint32_t op_index, bool at_start, Picoseconds t) {
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

RankMemory RankMemoryLedger::finish(double fragmentation) const {
  RankMemory m = m_;
  m.final_hbm_bytes = hbm_;
  m.allocator_reserve_bytes = fragmentation * (m.peak_hbm_bytes - m.persistent_bytes);
  m.peak_hbm_bytes += m.allocator_reserve_bytes;
  return m;
}

}  // namespace moesim
