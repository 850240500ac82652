// SPDX-License-Identifier: MIT
#include "plan/parallel_plan.hpp"

#include <algorithm>
#include <cassert>

namespace moesim {

ParallelPlan::ParallelPlan(const MeshShape& mesh) : shape_(mesh) {
  if (shape_.etp == 0) shape_.etp = shape_.tp;
  const MeshShape& shape = shape_;
  const int64_t f = shape.shard * shape.cp;
  assert(shape.etp >= 1 && shape.tp % shape.etp == 0);
  const int64_t expert_f = f * (shape.tp / shape.etp);
  assert(shape.ep >= 1 && expert_f % shape.ep == 0);
  num_ranks_ = shape.pp * shape.replicate * f * shape.tp;
  auto set = [&](GroupKind k, int64_t n) { group_size_[static_cast<size_t>(k)] = n; };
  set(GroupKind::tp, shape.tp);
  set(GroupKind::cp, shape.cp);
  set(GroupKind::fsdp, f);
  set(GroupKind::replicate, shape.replicate);
  set(GroupKind::ep, shape.ep);
  set(GroupKind::edp, expert_f / shape.ep);
  set(GroupKind::etp, shape.etp);
  set(GroupKind::pp, shape.pp);
  set(GroupKind::dp, shape.replicate * shape.shard);
}

namespace {

int64_t size_of(const MeshShape& s, MeshDim d) {
  switch (d) {
    case MeshDim::tp: return s.tp;
    case MeshDim::cp: return s.cp;
    case MeshDim::shard: return s.shard;
    case MeshDim::replicate: return s.replicate;
    case MeshDim::pp: return s.pp;
  }
  return 1;
}

template <class Coords>  // RankCoords, const or not
auto& coordinate(Coords& c, MeshDim d) {
  switch (d) {
    case MeshDim::tp: return c.tp;
    case MeshDim::cp: return c.cp;
    case MeshDim::shard: return c.shard;
    case MeshDim::replicate: return c.replicate;
    case MeshDim::pp: break;
  }
  return c.pp;
}

}  // namespace

RankCoords ParallelPlan::coords(int64_t rank) const {
  RankCoords c;
  for (MeshDim d : shape_.placement) {  // innermost first
    const int64_t n = size_of(shape_, d);
    coordinate(c, d) = rank % n;
    rank /= n;
  }
  return c;
}

int64_t ParallelPlan::rank_of(const RankCoords& c) const {
  int64_t rank = 0;
  for (auto it = shape_.placement.rbegin(); it != shape_.placement.rend(); ++it) {
    rank = rank * size_of(shape_, *it) + coordinate(c, *it);
  }
  return rank;
}

int64_t ParallelPlan::expert_index(const RankCoords& c) const {
  return (c.shard * shape_.cp + c.cp) * (shape_.tp / shape_.etp) + c.tp / shape_.etp;
}

int64_t ParallelPlan::at_expert_index(RankCoords c, int64_t f) const {
  const int64_t outer = shape_.tp / shape_.etp;
  c.tp = (f % outer) * shape_.etp + c.tp % shape_.etp;
  f /= outer;
  c.cp = f % shape_.cp;
  c.shard = f / shape_.cp;
  return rank_of(c);
}

int64_t ParallelPlan::ep_rank(int64_t rank) const { return expert_index(coords(rank)) % shape_.ep; }

int64_t ParallelPlan::edp_rank(int64_t rank) const { return expert_index(coords(rank)) / shape_.ep; }

int64_t ParallelPlan::group_rank(int64_t rank, GroupKind kind) const {
  const RankCoords c = coords(rank);
  switch (kind) {
    case GroupKind::tp: return c.tp;
    case GroupKind::cp: return c.cp;
    case GroupKind::fsdp: return c.shard * shape_.cp + c.cp;
    case GroupKind::replicate: return c.replicate;
    case GroupKind::ep: return ep_rank(rank);
    case GroupKind::edp: return edp_rank(rank);
    case GroupKind::pp: return c.pp;
    case GroupKind::dp: return c.replicate * shape_.shard + c.shard;
    case GroupKind::etp: return c.tp % shape_.etp;
  }
  return 0;
}

int64_t ParallelPlan::member(int64_t rank, GroupKind kind, int64_t index) const {
  RankCoords c = coords(rank);
  switch (kind) {
    case GroupKind::tp: c.tp = index; break;
    case GroupKind::cp: c.cp = index; break;
    case GroupKind::fsdp:
      c.shard = index / shape_.cp;
      c.cp = index % shape_.cp;
      break;
    case GroupKind::replicate: c.replicate = index; break;
    case GroupKind::ep:
    case GroupKind::edp: {
      const int64_t f = expert_index(c);
      const int64_t e = f % shape_.ep;
      const int64_t d = f / shape_.ep;
      return at_expert_index(c, kind == GroupKind::ep ? d * shape_.ep + index : index * shape_.ep + e);
    }
    case GroupKind::pp: c.pp = index; break;
    case GroupKind::dp:
      c.replicate = index / shape_.shard;
      c.shard = index % shape_.shard;
      break;
    case GroupKind::etp: c.tp = c.tp - c.tp % shape_.etp + index; break;
  }
  return rank_of(c);
}

std::vector<int64_t> ParallelPlan::members(int64_t rank, GroupKind kind) const {
  std::vector<int64_t> out(static_cast<size_t>(group_size(kind)));
  for (int64_t i = 0; i < group_size(kind); ++i) out[static_cast<size_t>(i)] = member(rank, kind, i);
  return out;
}

int64_t ParallelPlan::representative(int64_t program) const {
  RankCoords c;
  c.pp = program;
  return rank_of(c);
}

ParallelPlan build_parallel_plan(const ScenarioSpec& s) {
  const auto& p = s.parallel;
  MeshShape shape{p.pp.stages, p.fsdp.replicate, p.fsdp.shard, p.cp, p.tp.degree, p.ep, p.expert_tp()};
  if (p.placement.size() == shape.placement.size()) std::copy(p.placement.begin(), p.placement.end(), shape.placement.begin());
  return ParallelPlan(shape);
}

}  // namespace moesim
