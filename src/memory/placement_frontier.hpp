// SPDX-License-Identifier: MIT
// Which ops of a rank's program may still place a block in its slab. Ops start in queue order but
// queues run ahead of one another, so one release does not tell the slab whether an op issued
// before it is still to come. Ops are marked as they place; ops that allocate nothing never place.
// The slab merges two free neighbours only when no op still to place was issued between their
// releases (slab_allocator.hpp): such an op may reuse the earlier one but not the later.
#pragma once

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
    next_[op] = op + 1;
    if (op == lowest_) lowest_ = next_to_place(op + 1);
  }
  // The first op at or after `op` still to place; the number of ops when there is none.
  uint32_t next_to_place(uint32_t op);
  // Whether an op in (after, up_to] is still to place.
  bool to_place_between(uint32_t after, uint32_t up_to) { return up_to >= lowest_ && next_to_place(after + 1) <= up_to; }

 private:
  const Program* program_ = nullptr;
  // Union-find over op indices: next_[i] == i while op i is still to place, else a later op
  // (paths are halved on lookup, so a lookup is amortised near-constant).
  std::vector<uint32_t> next_;
  uint32_t lowest_ = 0;  // next_to_place(0), kept as ops place: most questions end at it
};

inline uint32_t PlacementFrontier::next_to_place(uint32_t op) {
  if (op >= next_.size()) return static_cast<uint32_t>(next_.size() - 1);
  while (next_[op] != op) {
    next_[op] = next_[next_[op]];
    op = next_[op];
  }
  return op;
}

}  // namespace moesim
