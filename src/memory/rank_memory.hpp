// SPDX-License-Identifier: MIT
// Memory of one rank over a step, per tier: HBM (persistent state, transient tensors by category)
// and host DDR (what swap moved there), applied op by op as the engine runs them, with the peak,
// when and after which op it happened, and the allocator's reserve over it: the transient tensors
// are placed in a slab as they come and go (slab_allocator.hpp), and what the slab needs beyond
// the live tensors at the peak is the reserve. The ledgers of one engine share their slabs where
// their placements agree (slab_tracks.hpp).
//
// Effects (graph/op.hpp MemAction) take effect at an op's start (alloc, the device copy of a
// swap-in) or end (free, the release of a swapped-out tensor from HBM): during a swap both
// copies exist, as they do on the hardware.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include <memory>

#include "core/enum_names.hpp"
#include "graph/program.hpp"
#include "memory/slab_tracks.hpp"

namespace moesim {

using Picoseconds = int64_t;
inline constexpr size_t kNumMemCategories = EnumNames<MemCategory>::names.size();

struct RankMemory {
  // The HBM peak: persistent state, the transient tensors live at that moment, and the
  // allocator's reserve over them: the slab's high water beyond those tensors, plus
  // `fragmentation` x the slab (finish).
  double peak_hbm_bytes = 0;
  std::array<double, kNumMemCategories> peak_transient{};  // by MemCategory, at the peak
  double allocator_reserve_bytes = 0;
  double slab_bytes = 0;  // the transient tensors' slab: its high water over the step
  double peak_ddr_bytes = 0;         // persistent_ddr_bytes and what swap moved there
  double persistent_bytes = 0;
  double persistent_ddr_bytes = 0;  // offloaded state (parallel.fsdp.offload), in host memory all step
  Picoseconds peak_time = 0;
  uint32_t peak_op = 0;      // op after whose effects the HBM peak was reached
  double final_hbm_bytes = 0;
  double min_hbm_bytes = 0;  // never below persistent if effects balance
};

class RankMemoryLedger {
 public:
  // A rank holding `persistent` bytes of HBM and `persistent_ddr` bytes of host memory (CPU
  // offload's state) for the whole step.
  explicit RankMemoryLedger(double persistent = 0, double persistent_ddr = 0);
  // Places this ledger's tensors on `tracks`, shared with the other ledgers of one engine (kept by
  // its owner from step to step); without it the ledger keeps tracks of its own.
  void share(SlabTracks* tracks) { tracks_ = tracks; }
  // Back to the state of a fresh ledger holding those bytes, keeping its buffers' capacity (the
  // engine reuses its ledgers from one sampled step to the next).
  void reset(double persistent, double persistent_ddr = 0);

  // Applies the effects of `op` (index `op_index` of `p`) at its start or end, at time t.
  void apply(const Program& p, const Op& op, uint32_t op_index, bool at_start, Picoseconds t);

  double hbm_bytes() const { return hbm_; }
  double ddr_bytes() const { return ddr_; }
  // What the allocator holds so far: persistent state, the slab's high water (at least the live
  // transient tensors' peak) and `fragmentation` x the slab. At the step's end it is the peak
  // the report shows; the memory timeline shows it beside the live bytes.
  double reserved_hbm_bytes(double fragmentation) const;
  // The step's summary; `fragmentation` is what an allocator loses beyond the slab's placement,
  // as a fraction of the slab.
  RankMemory finish(double fragmentation);

 private:
  // Slab placement waits until an instant is complete (place_pending): the engine reaches the
  // effects of one instant in event order, the slab takes them in program order.
  void place_pending();
  uint64_t slab_high_water() const { return tracks_ ? tracks_->high_water(track_, placed_) : 0; }

  const Program* program_ = nullptr;  // the program whose effects this step applies (one per step)
  std::vector<SlabEffect> pending_;   // placed (alloc, to_device) or released (free, to_host)
  Picoseconds pending_time_ = 0;
  std::unique_ptr<SlabTracks> own_tracks_;  // made when first needed, unless shared
  SlabTracks* tracks_ = nullptr;
  int32_t track_ = -1;  // the track this ledger's slab is on (-1: nothing placed yet)
  size_t placed_ = 0;   // effects of the track's log that are this ledger's
  double hbm_ = 0;
  double ddr_ = 0;
  std::array<double, kNumMemCategories> live_{};
  RankMemory m_;
};

}  // namespace moesim
