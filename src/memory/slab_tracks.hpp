// SPDX-License-Identifier: MIT
// The slab placements of the ranks of one engine, shared where they agree. A rank's slab
// (slab_allocator.hpp) depends only on the sequence of its placements and releases: the buffers
// and their sizes are its program's, and the order is the engine's (an instant's effects in
// program order, rank_memory.hpp). Ranks of one program mostly see the same sequence - the
// default's 128 ranks show 3 distinct ones in a sampled step, since the routing draw moves the
// experts' times but rarely the order of the allocations around them - so they share a track:
// one slab, its placement frontier and block handles, and the log of the effects placed in it.
// The first rank to reach a position of the log places its effect there; the others compare
// theirs with it and only move their position. A rank whose effect differs forks a track of its
// own, replayed from the log up to there (or joins the fork another rank made there with the
// same effect), so every rank's high water is the one its own slab would have had (tests/memory/test_slab_tracks.cpp compares them on random sequences).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "graph/program.hpp"
#include "memory/placement_frontier.hpp"
#include "memory/slab_allocator.hpp"

namespace moesim {

// One effect on the slab: op `op` places (takes) or releases buffer `buffer` of the program.
struct SlabEffect {
  uint32_t op = 0;
  uint32_t buffer = 0;
  bool takes = false;
  bool operator==(const SlabEffect&) const = default;
};

class SlabTracks {
 public:
  // Forgets every track, keeping their buffers for the next step.
  void reset();
  // The track every rank of `p` starts on.
  int32_t start(const Program& p);
  // A rank on `track` that has placed the log's first `position` effects places `batch` (one
  // instant's effects, in order) next. Returns the track it is on after them: `track`, or a fork
  // when the log holds other effects there. Throws std::logic_error on a buffer placed twice or
  // released unplaced.
  int32_t place(int32_t track, size_t position, std::span<const SlabEffect> batch);
  // The slab's high water after the first `position` effects of `track`'s log.
  uint64_t high_water(int32_t track, size_t position) const;
  int32_t num_tracks() const { return used_; }

 private:
  static constexpr SlabAllocator::Handle kNotPlaced = UINT32_MAX;
  struct Track {
    const Program* program = nullptr;
    SlabAllocator slab{false};
    PlacementFrontier frontier;
    std::vector<SlabAllocator::Handle> block;  // per buffer of the program, its block while placed
    std::vector<SlabEffect> log;
    std::vector<uint64_t> high_water;  // after each effect of the log
    size_t fork_at = 0;                // forks: the log's length shared with the track forked from
    std::vector<int32_t> forks;        // the tracks forked from this one
  };
  int32_t open(const Program& p);
  // Places `effects` at the end of `t`'s log; an op is marked placed after its last take.
  static void append(Track& t, std::span<const SlabEffect> effects);

  std::deque<Track> tracks_;  // stable addresses: a slab follows its track's frontier
  int32_t used_ = 0;
  std::vector<std::pair<const Program*, int32_t>> roots_;  // per program, the track its ranks start on
  std::vector<SlabEffect> scratch_;
};

}  // namespace moesim
