// SPDX-License-Identifier: MIT
#include "memory/placement_frontier.hpp"

namespace moesim {

namespace {

bool allocates(const Program& p, const Op& op) {
  for (const MemEffect& e : p.effects_of(op)) {
    if (e.action == MemAction::alloc || e.action == MemAction::to_device) return true;
  }
  return false;
}

}  // namespace

void PlacementFrontier::reset(const Program& p) {
  reset(static_cast<uint32_t>(p.ops.size()));
  program_ = &p;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    if (!allocates(p, p.ops[i])) next_[i] = i + 1;
  }
  lowest_ = next_to_place(0);
}

void PlacementFrontier::reset(uint32_t num_ops) {
  program_ = nullptr;
  next_.resize(num_ops + 1);
  for (uint32_t i = 0; i <= num_ops; ++i) next_[i] = i;
  lowest_ = 0;
}

}  // namespace moesim
