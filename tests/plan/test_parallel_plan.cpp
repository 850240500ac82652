// SPDX-License-Identifier: MIT
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include "plan/parallel_plan.hpp"

using namespace moesim;

namespace {

// Every rank is in exactly one group of each kind; a group is the same set seen from each member;
// group_rank is the position in member order.
void check_partition(const ParallelPlan& plan) {
  for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
    CAPTURE(name);
    std::vector<int> seen(static_cast<size_t>(plan.num_ranks()), 0);
    for (int64_t r = 0; r < plan.num_ranks(); ++r) {
      const auto m = plan.members(r, kind);
      REQUIRE(static_cast<int64_t>(m.size()) == plan.group_size(kind));
      CHECK(m[static_cast<size_t>(plan.group_rank(r, kind))] == r);
      CHECK(plan.group_id(r, kind) == m.front());
      if (plan.group_id(r, kind) == r) {
        for (int64_t x : m) ++seen[static_cast<size_t>(x)];
      }
      for (int64_t x : m) CHECK(plan.members(x, kind) == m);
    }
    CHECK(std::all_of(seen.begin(), seen.end(), [](int v) { return v == 1; }));
  }
}

}  // namespace

TEST_CASE("coordinates round-trip and TP is innermost") {
  const ParallelPlan plan(MeshShape{2, 2, 4, 2, 2, 4});
  CHECK(plan.num_ranks() == 64);
  for (int64_t r = 0; r < plan.num_ranks(); ++r) CHECK(plan.rank_of(plan.coords(r)) == r);
  CHECK(plan.members(0, GroupKind::tp) == std::vector<int64_t>{0, 1});
  CHECK(plan.num_programs() == 2);
  CHECK(plan.program_of(63) == 1);
  CHECK(plan.representative(1) == 32);
}

TEST_CASE("groups partition the ranks for several meshes") {
  check_partition(ParallelPlan(MeshShape{1, 1, 128, 1, 1, 64}));
  check_partition(ParallelPlan(MeshShape{2, 2, 4, 2, 2, 4}));
  check_partition(ParallelPlan(MeshShape{4, 1, 2, 2, 2, 2}));
  check_partition(ParallelPlan(MeshShape{1, 3, 1, 1, 1, 1}));
}

TEST_CASE("FSDP2 + EP64 on 128 devices: EP groups are 64 consecutive ranks, EDP pairs rank r and r+64") {
  const ParallelPlan plan(MeshShape{1, 1, 128, 1, 1, 64});
  CHECK(plan.group_size(GroupKind::fsdp) == 128);
  CHECK(plan.group_size(GroupKind::ep) == 64);
  CHECK(plan.group_size(GroupKind::edp) == 2);
  CHECK(plan.members(70, GroupKind::ep).front() == 64);
  CHECK(plan.members(70, GroupKind::ep).back() == 127);
  CHECK(plan.members(5, GroupKind::edp) == std::vector<int64_t>{5, 69});
  CHECK(plan.ep_rank(69) == 5);
  CHECK(plan.group_size(GroupKind::dp) == 128);
}

TEST_CASE("EP spans shard and CP ranks: every EP group holds each ep_rank once") {
  const ParallelPlan plan(MeshShape{1, 2, 4, 4, 2, 8});
  for (int64_t r = 0; r < plan.num_ranks(); ++r) {
    std::set<int64_t> ep_ranks;
    for (int64_t m : plan.members(r, GroupKind::ep)) {
      ep_ranks.insert(plan.ep_rank(m));
      CHECK(plan.coords(m).tp == plan.coords(r).tp);
      CHECK(plan.coords(m).replicate == plan.coords(r).replicate);
      CHECK(plan.edp_rank(m) == plan.edp_rank(r));
    }
    CHECK(ep_ranks.size() == 8);
  }
}

TEST_CASE("MoE parallel folding: with ETP < TP, EP spans the TP ranks outside each expert-TP group") {
  // TP 4 split into ETP 2 x 2; shard 4 -> 8 expert positions per (pp, replicate), EP 4, EDP 2.
  const ParallelPlan plan(MeshShape{1, 2, 4, 1, 4, 4, 2});
  check_partition(plan);
  CHECK(plan.experts_folded());
  CHECK(plan.expert_tp_group() == GroupKind::etp);
  CHECK(plan.group_size(GroupKind::etp) == 2);
  CHECK(plan.group_size(GroupKind::edp) == 2);
  // Ranks 0 and 1 are one expert-TP pair; 2 and 3 are the next EP rank of the same shard.
  CHECK(plan.members(0, GroupKind::etp) == std::vector<int64_t>{0, 1});
  CHECK(plan.members(0, GroupKind::ep) == std::vector<int64_t>{0, 2, 4, 6});
  CHECK(plan.members(1, GroupKind::ep) == std::vector<int64_t>{1, 3, 5, 7});
  CHECK(plan.members(0, GroupKind::edp) == std::vector<int64_t>{0, 8});
  for (int64_t r = 0; r < plan.num_ranks(); ++r) {
    for (int64_t m : plan.members(r, GroupKind::ep)) {
      CHECK(plan.coords(m).tp % 2 == plan.coords(r).tp % 2);  // same expert-TP slice
      CHECK(plan.coords(m).replicate == plan.coords(r).replicate);
    }
  }
  // ETP = TP is today's layout: EP inside shard x cp, the experts' TP group is TP.
  const ParallelPlan unfolded(MeshShape{1, 2, 4, 1, 4, 4});
  CHECK_FALSE(unfolded.experts_folded());
  CHECK(unfolded.expert_tp_group() == GroupKind::tp);
  CHECK(unfolded.members(0, GroupKind::ep) == std::vector<int64_t>{0, 4, 8, 12});
  CHECK(unfolded.members(0, GroupKind::etp) == unfolded.members(0, GroupKind::tp));
  // ETP 1: every TP rank is its own EP position.
  const ParallelPlan etp1(MeshShape{1, 1, 2, 1, 4, 8, 1});
  check_partition(etp1);
  CHECK(etp1.members(5, GroupKind::ep) == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7});
  CHECK(etp1.group_size(GroupKind::edp) == 1);
}

TEST_CASE("placement: any order of the mesh dimensions partitions the ranks, and its innermost one is consecutive") {
  MeshShape shape{2, 2, 2, 3, 2, 2};  // pp 2, replicate 2, shard 2, cp 3, tp 2, ep 2: 48 ranks
  std::array<MeshDim, 5> order{MeshDim::tp, MeshDim::cp, MeshDim::shard, MeshDim::replicate, MeshDim::pp};
  std::sort(order.begin(), order.end());
  int permutations = 0;
  do {
    ++permutations;
    shape.placement = order;
    const ParallelPlan plan(shape);
    for (int64_t r = 0; r < plan.num_ranks(); ++r) CHECK(plan.rank_of(plan.coords(r)) == r);
    check_partition(plan);
    // The innermost dimension's group of rank 0 is ranks 0, 1, ...; the outermost's is strided by
    // the product of all the others.
    auto group_of = [](MeshDim d) {
      switch (d) {
        case MeshDim::tp: return GroupKind::tp;
        case MeshDim::cp: return GroupKind::cp;
        case MeshDim::shard: return GroupKind::dp;  // shard x replicate with replicate 1 below
        case MeshDim::replicate: return GroupKind::replicate;
        case MeshDim::pp: return GroupKind::pp;
      }
      return GroupKind::pp;
    };
    if (order.front() != MeshDim::shard) {
      const auto inner = plan.members(0, group_of(order.front()));
      for (size_t i = 0; i < inner.size(); ++i) CHECK(inner[i] == static_cast<int64_t>(i));
    }
    if (order.back() == MeshDim::pp) CHECK(plan.representative(1) == plan.num_ranks() / 2);
    if (order.front() == MeshDim::pp) CHECK(plan.program_of(1) == 1);
  } while (std::next_permutation(order.begin(), order.end()));
  CHECK(permutations == 120);
}
