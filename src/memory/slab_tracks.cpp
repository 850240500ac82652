// SPDX-License-Identifier: MIT
#include "memory/slab_tracks.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>

namespace moesim {

void SlabTracks::reset() {
  used_ = 0;
  roots_.clear();
}

int32_t SlabTracks::open(const Program& p) {
  if (used_ == static_cast<int32_t>(tracks_.size())) tracks_.emplace_back();
  Track& t = tracks_[static_cast<size_t>(used_)];
  t.program = &p;
  t.slab.reset();
  t.slab.follow(&t.frontier);
  t.frontier.reset(p);
  t.block.assign(p.buffers.size(), kNotPlaced);
  t.log.clear();
  t.high_water.clear();
  t.fork_at = 0;
  t.forks.clear();
  return used_++;
}

int32_t SlabTracks::start(const Program& p) {
  for (const auto& [program, track] : roots_) {
    if (program == &p) return track;
  }
  const int32_t track = open(p);
  roots_.emplace_back(&p, track);
  return track;
}

void SlabTracks::append(Track& t, std::span<const SlabEffect> effects) {
  const Program& p = *t.program;
  auto fail = [&](const SlabEffect& x, const char* what) {
    throw std::logic_error("buffer '" + p.names[p.buffers[x.buffer].name] + "' " + what + " op '" +
                           p.name_of(p.ops[x.op]) + "'");
  };
  for (size_t i = 0; i < effects.size(); ++i) {
    const SlabEffect& x = effects[i];
    SlabAllocator::Handle& block = t.block[x.buffer];
    if (x.takes) {
      if (block != kNotPlaced) fail(x, "placed again by");
      block = t.slab.place(slab_block_bytes(p.buffers[x.buffer].bytes), x.op).block;
      const bool op_done = i + 1 == effects.size() || effects[i + 1].op != x.op || !effects[i + 1].takes;
      if (op_done) t.frontier.placed(x.op);
    } else {
      if (block == kNotPlaced) fail(x, "released but not placed, by");
      t.slab.release(block, x.op, -1, 0);  // the engine needs no waits
      block = kNotPlaced;
    }
    t.log.push_back(x);
    t.high_water.push_back(t.slab.high_water());
  }
}

int32_t SlabTracks::place(int32_t track, size_t position, std::span<const SlabEffect> batch) {
  Track* t = &tracks_[static_cast<size_t>(track)];
  // What the log already holds from `position` on must be this batch's start.
  const size_t known = std::min(batch.size(), t->log.size() - position);
  const auto [log_end, batch_end] = std::mismatch(t->log.begin() + static_cast<std::ptrdiff_t>(position),
                                                  t->log.begin() + static_cast<std::ptrdiff_t>(position + known),
                                                  batch.begin());
  const auto agreed = static_cast<size_t>(batch_end - batch.begin());
  if (agreed == known && position + known == t->log.size()) {
    append(*t, batch.subspan(agreed));  // this rank leads the track from here (if anything is left)
    return track;
  }
  if (agreed == batch.size()) return track;  // the whole batch is in the log already
  // Another effect there: the fork another rank made at this point with this effect, if any
  // (it shares the log up to there, so the comparison goes on in it), else a new fork holding
  // the log's agreed prefix, then the rest of this batch.
  const size_t at = position + agreed;
  for (const int32_t f : t->forks) {
    const Track& other = tracks_[static_cast<size_t>(f)];
    if (other.fork_at == at && other.log[at] == batch[agreed]) return place(f, position, batch);
  }
  scratch_.assign(t->log.begin(), t->log.begin() + static_cast<std::ptrdiff_t>(at));
  scratch_.insert(scratch_.end(), batch.begin() + static_cast<std::ptrdiff_t>(agreed), batch.end());
  const int32_t fork = open(*t->program);
  Track& f = tracks_[static_cast<size_t>(fork)];
  f.fork_at = at;
  t->forks.push_back(fork);
  append(f, scratch_);
  return fork;
}

uint64_t SlabTracks::high_water(int32_t track, size_t position) const {
  if (track < 0 || position == 0) return 0;
  return tracks_[static_cast<size_t>(track)].high_water[position - 1];
}

}  // namespace moesim
