// SPDX-License-Identifier: MIT
#include "memory/rank_memory.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moesim {

RankMemoryLedger::RankMemoryLedger(double persistent, double persistent_ddr) { reset(persistent, persistent_ddr); }

void RankMemoryLedger::reset(double persistent, double persistent_ddr) {
  pending_.clear();
  pending_time_ = 0;
  if (own_tracks_) own_tracks_->reset();
  program_ = nullptr;
  track_ = -1;
  placed_ = 0;
  hbm_ = persistent;
  ddr_ = persistent_ddr;
  live_ = {};
  m_ = RankMemory{};
  m_.persistent_bytes = persistent;
  m_.persistent_ddr_bytes = persistent_ddr;
  m_.peak_ddr_bytes = persistent_ddr;
  m_.peak_hbm_bytes = persistent;
  m_.min_hbm_bytes = persistent;
}

void RankMemoryLedger::apply(const Program& p, const Op& op, uint32_t op_index, bool at_start, Picoseconds t) {
  if (op.num_effects > 0) {
    if (!pending_.empty() && t != pending_time_) place_pending();  // an instant is complete
    pending_time_ = t;
    if (!program_) program_ = &p;
    if (program_ != &p) throw std::logic_error("a memory ledger applies one program's effects per step");
  }
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
    if (dh != 0) pending_.push_back({op_index, e.buffer, dh > 0});
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
  const auto before = [](const SlabEffect& a, const SlabEffect& b) {
    return a.op != b.op ? a.op < b.op : a.takes > b.takes;
  };
  // Stable insertion sort: an instant's effects are few and nearly in order, and std::stable_sort
  // would allocate a buffer per instant.
  for (size_t i = 1; i < pending_.size(); ++i) {
    if (!before(pending_[i], pending_[i - 1])) continue;
    const SlabEffect x = pending_[i];
    size_t j = i;
    for (; j > 0 && before(x, pending_[j - 1]); --j) pending_[j] = pending_[j - 1];
    pending_[j] = x;
  }
  if (pending_.empty()) return;
  if (!tracks_) {
    own_tracks_ = std::make_unique<SlabTracks>();
    tracks_ = own_tracks_.get();
  }
  if (track_ < 0) track_ = tracks_->start(*program_);
  track_ = tracks_->place(track_, placed_, pending_);
  placed_ += pending_.size();
  pending_.clear();
}

double RankMemoryLedger::reserved_hbm_bytes(double fragmentation) const {
  const auto slab = static_cast<double>(slab_high_water());
  const double transient_peak = m_.peak_hbm_bytes - m_.persistent_bytes;
  return m_.persistent_bytes + std::max(slab, transient_peak) + fragmentation * slab;
}

RankMemory RankMemoryLedger::finish(double fragmentation) {
  place_pending();
  RankMemory m = m_;
  m.final_hbm_bytes = hbm_;
  m.slab_bytes = static_cast<double>(slab_high_water());
  m.peak_hbm_bytes = reserved_hbm_bytes(fragmentation);
  m.allocator_reserve_bytes = m.peak_hbm_bytes - m_.peak_hbm_bytes;
  return m;
}

}  // namespace moesim
