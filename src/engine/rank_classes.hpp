// SPDX-License-Identifier: MIT
// Interchangeable ranks: the classes of ranks that, given equal loads, run through a step at the
// same times, so the engine can simulate one representative per class.
//
// Two ranks are interchangeable when they run the same program, at the same speed, at the same
// position in their context-parallel ring (the first and last members of a CP ring exchange less),
// and, for every group kind, their groups hold the same multiset of classes. The last condition
// refers to the classes themselves, so the partition is found by colour refinement: start from
// (program, speed, CP position) and split a class whenever its members' groups differ in the
// multisets of classes they contain, until nothing splits. The result is the coarsest stable
// partition: for a uniform plan without stragglers, one class per pipeline stage; a straggler
// gets a class of its own, and so do the ranks that share a group with it, because they wait for
// it while the others do not.
//
// Why one representative is exact: every rank of a class meets, in each of its groups, one member
// of each class of that group's multiset, and every rank of those classes does the same. So in the
// quotient - a collective waits for one representative per class of its group; a flow crosses one
// port per class - each port carries the same flows as every port of the ranks it stands for, the
// max-min shares are the same, and every op starts and ends at the same time as on each member.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "plan/parallel_plan.hpp"

namespace moesim {

struct RankClasses {
  std::vector<int32_t> class_of;                // per rank
  std::vector<std::vector<int32_t>> members;    // per class, ascending; members[c][0] represents c
  // Per group kind, per class: the classes found in the groups of its members, ascending.
  std::array<std::vector<std::vector<int32_t>>, kNumGroupKinds> group_classes;

  int64_t size() const { return static_cast<int64_t>(members.size()); }
  int32_t representative(int32_t cls) const { return members[static_cast<size_t>(cls)].front(); }
};

// rank_program: the program each rank runs; rank_speed: per-rank slowdown of every kernel,
// rank_compute_slowdown: of compute-bound kernels (EngineOptions; empty: all nominal).
RankClasses interchangeable_ranks(const ParallelPlan& plan, std::span<const int32_t> rank_program,
                                  std::span<const double> rank_speed,
                                  std::span<const double> rank_compute_slowdown = {});

}  // namespace moesim
