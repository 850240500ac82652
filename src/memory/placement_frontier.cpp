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
  num_ops_ = static_cast<uint32_t>(p.ops.size());
  bits_.assign((num_ops_ + 63) / 64, 0);
  summary_.assign((bits_.size() + 63) / 64, 0);
  for (uint32_t i = 0; i < num_ops_; ++i) {
    if (allocates(p, p.ops[i])) set(i);
  }
  program_ = &p;
  lowest_ = next_to_place(0);
}

void PlacementFrontier::reset(uint32_t num_ops) {
  num_ops_ = num_ops;
  bits_.assign((num_ops_ + 63) / 64, 0);
  summary_.assign((bits_.size() + 63) / 64, 0);
  for (uint32_t i = 0; i < num_ops_; ++i) set(i);
  program_ = nullptr;
  lowest_ = next_to_place(0);
}

}  // namespace moesim
