// SPDX-License-Identifier: MIT
// Which ops of a rank's program may still place a block in its slab. Ops start in queue order but
// queues run ahead of one another, so one release does not tell the slab whether an op issued
// before it is still to come. Ops are marked as they place; ops that allocate nothing never place.
// The slab merges two free neighbours only when no op still to place was issued between their
// releases (slab_allocator.hpp): such an op may reuse the earlier one but not the later.
//
// One bit per op (a set bit: still to place) and one bit per 64-op word (set: the word has a set
// bit), so that the first op still to place at or after any op is a few word reads away; every
// slab track (slab_tracks.hpp) keeps one, an eighth of a byte per op (the union-find over op
// indices it replaced kept 4 bytes).
#pragma once

#include <bit>
#include <cstdint>
#include <vector>

#include "graph/program.hpp"

namespace moesim {

class PlacementFrontier {
 public:
  // Every allocating op of `p` is still to place (a new step; keeps capacity).
  void reset(const Program& p);
  // Every op of 0..num_ops-1 is still to place (no program: tests).
  void reset(uint32_t num_ops);
  void clear() { program_ = nullptr; }  // forgets the program until the next reset
  const Program* program() const { return program_; }

  void placed(uint32_t op) {
    uint64_t& w = bits_[op / 64];
    w &= ~(uint64_t{1} << (op % 64));
    if (w == 0) summary_[op / 4096] &= ~(uint64_t{1} << (op / 64 % 64));
    if (op == lowest_) lowest_ = next_to_place(op + 1);
  }
  // The first op at or after `op` still to place; the number of ops when there is none.
  uint32_t next_to_place(uint32_t op) const;
  // Whether an op in (after, up_to] is still to place.
  bool to_place_between(uint32_t after, uint32_t up_to) const {
    return up_to >= lowest_ && next_to_place(after + 1) <= up_to;
  }

 private:
  void set(uint32_t op) {
    bits_[op / 64] |= uint64_t{1} << (op % 64);
    summary_[op / 4096] |= uint64_t{1} << (op / 64 % 64);
  }

  const Program* program_ = nullptr;
  uint32_t num_ops_ = 0;
  std::vector<uint64_t> bits_;     // bit op % 64 of word op / 64: op still to place
  std::vector<uint64_t> summary_;  // bit w % 64 of word w / 64: bits_[w] != 0
  uint32_t lowest_ = 0;            // next_to_place(0), kept as ops place: most questions end at it
};

inline uint32_t PlacementFrontier::next_to_place(uint32_t op) const {
  if (op >= num_ops_) return num_ops_;
  uint32_t word = op / 64;
  // The rest of op's own word.
  if (const uint64_t rest = bits_[word] & (~uint64_t{0} << (op % 64)); rest != 0) {
    return word * 64 + static_cast<uint32_t>(std::countr_zero(rest));
  }
  // The next non-empty word: the rest of its summary word, then whole summary words.
  ++word;
  for (uint32_t s = word / 64; s < summary_.size(); ++s) {
    uint64_t words = summary_[s];
    if (s == word / 64) words &= ~uint64_t{0} << (word % 64);  // only words from `word` on
    if (words == 0) continue;
    const uint32_t w = s * 64 + static_cast<uint32_t>(std::countr_zero(words));
    return w * 64 + static_cast<uint32_t>(std::countr_zero(bits_[w]));
  }
  return num_ops_;
}

}  // namespace moesim
