// SPDX-License-Identifier: MIT
#include "engine/slot_map.hpp"

namespace moesim {

void SlotMap::assign(std::span<const int32_t> rank_program, bool distinct, std::span<const double> rank_speed,
                     std::span<const double> rank_compute_slowdown) {
  const int64_t num_ranks = plan_.num_ranks();
  distinct_ = distinct;
  slot_rank_.clear();
  if (distinct_) {
    classes_ = interchangeable_ranks(plan_, rank_program, rank_speed, rank_compute_slowdown);
    for (int32_t c = 0; c < classes_.size(); ++c) slot_rank_.push_back(classes_.representative(c));
    class_prefix_.assign(static_cast<size_t>(classes_.size()), std::vector<int32_t>(static_cast<size_t>(num_ranks) + 1, 0));
    for (int32_t c = 0; c < classes_.size(); ++c) {
      auto& prefix = class_prefix_[static_cast<size_t>(c)];
      for (int64_t r = 0; r < num_ranks; ++r) {
        prefix[static_cast<size_t>(r) + 1] = prefix[static_cast<size_t>(r)] + (classes_.class_of[static_cast<size_t>(r)] == c);
      }
    }
  } else {
    classes_ = RankClasses{};
    for (int32_t r = 0; r < num_ranks; ++r) slot_rank_.push_back(r);
  }
}

}  // namespace moesim
