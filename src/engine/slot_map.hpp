// SPDX-License-Identifier: MIT
// The ranks the engine simulates, "slots": every rank, or (EngineOptions::distinct_ranks) one
// representative per class of interchangeable ranks (rank_classes.hpp). All per-rank state of a
// run is per slot; a collective on a slot waits for one slot per member of its group, or per
// class found in it.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/rank_classes.hpp"
#include "plan/parallel_plan.hpp"

namespace moesim {

class SlotMap {
 public:
  // Keeps a reference to the plan, which must outlive the map.
  explicit SlotMap(const ParallelPlan& plan) : plan_(plan) {}

  // Every rank, or (distinct) one slot per class of interchangeable ranks given each rank's
  // program and speeds (empty: all nominal; interchangeable_ranks).
  void assign(std::span<const int32_t> rank_program, bool distinct, std::span<const double> rank_speed,
              std::span<const double> rank_compute_slowdown = {});

  int64_t num_slots() const { return static_cast<int64_t>(slot_rank_.size()); }
  bool distinct() const { return distinct_; }
  const std::vector<int32_t>& slot_rank() const { return slot_rank_; }
  int32_t rank_of(int32_t slot) const { return slot_rank_[static_cast<size_t>(slot)]; }
  int32_t slot_of(int64_t rank) const {
    return distinct_ ? classes_.class_of[static_cast<size_t>(rank)] : static_cast<int32_t>(rank);
  }

  // The ranks `slot` stands for: its rank, or every member of its class (ascending).
  template <typename F>
  void for_each_rank(int32_t slot, F&& f) const {
    if (distinct_) {
      for (int32_t rank : classes_.members[static_cast<size_t>(slot)]) f(static_cast<int64_t>(rank));
    } else {
      f(static_cast<int64_t>(slot));
    }
  }

  // The slots a collective of `kind` on `slot` waits for, and a key naming that group among the
  // groups of its kind.
  int64_t group_need(int32_t slot, GroupKind kind) const {
    return distinct_ ? static_cast<int64_t>(classes_.group_classes[static_cast<size_t>(kind)][static_cast<size_t>(slot)].size())
                     : plan_.group_size(kind);
  }
  int64_t group_key(int32_t slot, GroupKind kind) const {
    return distinct_ ? classes_.group_classes[static_cast<size_t>(kind)][static_cast<size_t>(slot)].front()
                     : plan_.group_id(slot, kind);
  }
  // Those slots, in group order.
  template <typename F>
  void for_each_group_slot(int32_t slot, GroupKind kind, F&& f) const {
    if (distinct_) {
      for (int32_t s : classes_.group_classes[static_cast<size_t>(kind)][static_cast<size_t>(slot)]) f(s);
    } else {
      for (int64_t m = 0; m < plan_.group_size(kind); ++m) f(static_cast<int32_t>(plan_.member(slot, kind, m)));
    }
  }

  // Distinct mode only: how many ranks of `slot`'s class lie in [first, last), 0 <= first <= last
  // <= the number of ranks (a prefix count, O(1)).
  int32_t class_ranks_in(int32_t slot, int64_t first, int64_t last) const {
    const auto& prefix = class_prefix_[static_cast<size_t>(slot)];
    return prefix[static_cast<size_t>(last)] - prefix[static_cast<size_t>(first)];
  }

 private:
  const ParallelPlan& plan_;
  bool distinct_ = false;
  RankClasses classes_;                             // distinct mode only
  std::vector<int32_t> slot_rank_;                  // the rank each slot simulates
  std::vector<std::vector<int32_t>> class_prefix_;  // distinct mode: per class, its ranks among [0, r)
};

}  // namespace moesim
