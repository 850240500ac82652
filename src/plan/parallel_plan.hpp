// SPDX-License-Identifier: MIT
// ParallelPlan: the device mesh of a scenario, its process groups, and which ranks run the same
// program.
//
// Mesh dimensions in the placement's order, innermost first; by default tp, cp, shard, replicate,
// pp (TP innermost, so TP groups sit in one node): rank = (((pp * R + replicate) * S + shard) * CP +
// cp) * TP + tp. A scenario may order them otherwise (parallel.placement); the groups below are
// defined on coordinates and do not depend on it, only which ranks they hold does.
// The experts have a layout of their own (Megatron-Core's "MoE parallel folding"): expert tensor
// parallelism ETP divides TP, tp = tp_outer * ETP + tp_inner, and expert parallelism is carved out
// of the flattened dimension f = (shard * CP + cp) * (TP / ETP) + tp_outer:
//   ep_rank = f % EP (experts split over EP ranks), edp_rank = f / EP (each expert's weights are
//   FSDP-sharded over the EP ranks that hold the same experts: the expert-data-parallel group).
// With ETP = TP (the default) f = shard * CP + cp: experts are TP-split like the dense layers and
// EP spans data-parallel and context-parallel ranks only; with ETP < TP, EP also spans TP ranks.
// Groups (every rank belongs to exactly one group of each kind):
//   tp        vary tp                       Megatron TP / SP collectives
//   etp       vary tp_inner (ETP)           TP / SP collectives of the routed experts
//   cp        vary cp                       context-parallel KV and state exchange
//   fsdp      vary shard and cp (S x CP)    FSDP2 all-gather / reduce-scatter of non-expert weights
//   replicate vary replicate                HSDP gradient all-reduce (plain DP when S = 1)
//   ep        vary ep_rank (EP)             token dispatch / combine all-to-all
//   edp       vary edp_rank (S x CP x TP / ETP / EP)  FSDP2 of expert weights
//   pp        vary pp                       pipeline send / receive
//   dp        vary replicate and shard      ranks that read different data
// Ranks in different pipeline stages run different programs; all ranks of one stage run the same
// program (their differences - expert loads, all-to-all sizes - are parameters).
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/enum_names.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

enum class GroupKind : uint8_t { tp, cp, fsdp, replicate, ep, edp, pp, dp, etp };
inline constexpr int kNumGroupKinds = 9;

struct RankCoords {
  int64_t pp = 0;
  int64_t replicate = 0;
  int64_t shard = 0;
  int64_t cp = 0;
  int64_t tp = 0;

  friend bool operator==(const RankCoords&, const RankCoords&) = default;
};

struct MeshShape {
  int64_t pp = 1;
  int64_t replicate = 1;
  int64_t shard = 1;
  int64_t cp = 1;
  int64_t tp = 1;
  int64_t ep = 1;
  int64_t etp = 0;  // expert tensor parallelism, a divisor of tp; 0: tp (the plan stores the value)
  std::array<MeshDim, 5> placement{MeshDim::tp, MeshDim::cp, MeshDim::shard, MeshDim::replicate, MeshDim::pp};

  friend bool operator==(const MeshShape&, const MeshShape&) = default;
};

class ParallelPlan {
 public:
  explicit ParallelPlan(const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  int64_t num_ranks() const { return num_ranks_; }

  RankCoords coords(int64_t rank) const;
  int64_t rank_of(const RankCoords& c) const;
  int64_t ep_rank(int64_t rank) const;
  int64_t edp_rank(int64_t rank) const;

  int64_t group_size(GroupKind kind) const { return group_size_[static_cast<size_t>(kind)]; }
  // Position of `rank` in its group of `kind` (0 .. group_size - 1).
  int64_t group_rank(int64_t rank, GroupKind kind) const;
  // The member at `index` of `rank`'s group of `kind`; O(1), no allocation.
  int64_t member(int64_t rank, GroupKind kind, int64_t index) const;
  // All members in group-rank order.
  std::vector<int64_t> members(int64_t rank, GroupKind kind) const;
  // A canonical id of the group instance (its first member), for matching collectives.
  int64_t group_id(int64_t rank, GroupKind kind) const { return member(rank, kind, 0); }

  // Derived numbers of the plan, owned here so that no later stage recomputes them.
  int64_t experts_per_rank(int64_t num_experts) const { return num_experts / shape_.ep; }
  // Whether the routed experts run in a TP group of their own (ETP < TP; parallel folding).
  bool experts_folded() const { return shape_.etp != shape_.tp; }
  // The group the routed experts' TP collectives run in: the dense layers' TP group, or ETP's.
  GroupKind expert_tp_group() const { return experts_folded() ? GroupKind::etp : GroupKind::tp; }
  // Of `tokens` a rank holds in a micro-batch, those it routes to its EP group: all of them, or,
  // folded (which needs sequence parallelism), its expert-TP group's sequence shards.
  int64_t routed_tokens(int64_t tokens) const {
    return experts_folded() ? tokens / shape_.tp * shape_.etp : tokens;
  }

  int64_t num_programs() const { return shape_.pp; }
  int64_t program_of(int64_t rank) const { return coords(rank).pp; }
  // The first rank of each program, a representative for per-program work.
  int64_t representative(int64_t program) const;

 private:
  // The flattened expert dimension f of a rank (see above), and the rank at f with the other
  // coordinates of `c`.
  int64_t expert_index(const RankCoords& c) const;
  int64_t at_expert_index(RankCoords c, int64_t f) const;

  MeshShape shape_;
  int64_t num_ranks_ = 1;
  std::array<int64_t, kNumGroupKinds> group_size_{};
};

ParallelPlan build_parallel_plan(const ScenarioSpec& scenario);

template <>
struct EnumNames<GroupKind> {
  static constexpr std::array<std::pair<std::string_view, GroupKind>, kNumGroupKinds> names{{
      {"tp", GroupKind::tp},
      {"cp", GroupKind::cp},
      {"fsdp", GroupKind::fsdp},
      {"replicate", GroupKind::replicate},
      {"ep", GroupKind::ep},
      {"edp", GroupKind::edp},
      {"pp", GroupKind::pp},
      {"dp", GroupKind::dp},
      {"etp", GroupKind::etp},
  }};
};

}  // namespace moesim
