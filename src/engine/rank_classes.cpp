// SPDX-License-Identifier: MIT
#include "engine/rank_classes.hpp"

#include <algorithm>
#include <bit>
#include <map>

namespace moesim {
namespace {

// Dense ids for keys in order of first appearance, so class ids follow their smallest rank.
template <typename Key>
class Numbering {
 public:
  int32_t operator()(const Key& key) {
    auto [it, inserted] = ids_.try_emplace(key, static_cast<int32_t>(ids_.size()));
    return it->second;
  }
  int32_t size() const { return static_cast<int32_t>(ids_.size()); }

 private:
  std::map<Key, int32_t> ids_;
};

// A group's classes as (class, count) pairs, ascending: the multiset, run-length encoded.
using Multiset = std::vector<std::pair<int32_t, int64_t>>;

Multiset classes_in_group(const ParallelPlan& plan, int64_t first, GroupKind kind, const std::vector<int32_t>& color) {
  std::vector<int32_t> c;
  const int64_t n = plan.group_size(kind);
  c.reserve(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) c.push_back(color[static_cast<size_t>(plan.member(first, kind, i))]);
  std::sort(c.begin(), c.end());
  Multiset m;
  for (int32_t x : c) {
    if (m.empty() || m.back().first != x) m.emplace_back(x, 0);
    ++m.back().second;
  }
  return m;
}

}  // namespace

RankClasses interchangeable_ranks(const ParallelPlan& plan, std::span<const int32_t> rank_program,
                                  std::span<const double> rank_speed,
                                  std::span<const double> rank_compute_slowdown) {
  const int64_t n = plan.num_ranks();
  std::vector<int32_t> color(static_cast<size_t>(n));
  {
    Numbering<std::tuple<int32_t, uint64_t, uint64_t, int64_t>> initial;
    for (int64_t r = 0; r < n; ++r) {
      const double speed = rank_speed.empty() ? 1.0 : rank_speed[static_cast<size_t>(r)];
      const double compute = rank_compute_slowdown.empty() ? 1.0 : rank_compute_slowdown[static_cast<size_t>(r)];
      color[static_cast<size_t>(r)] = initial({rank_program[static_cast<size_t>(r)], std::bit_cast<uint64_t>(speed),
                                               std::bit_cast<uint64_t>(compute), plan.group_rank(r, GroupKind::cp)});
    }
  }
  int32_t num_classes = 0;
  for (;;) {
    // Each rank's signature: its colour, then for every group kind the id of its group's multiset.
    std::vector<std::vector<int32_t>> signature(static_cast<size_t>(n));
    for (int64_t r = 0; r < n; ++r) signature[static_cast<size_t>(r)].push_back(color[static_cast<size_t>(r)]);
    for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
      Numbering<Multiset> multisets;
      std::vector<int32_t> group_multiset(static_cast<size_t>(n), -1);
      for (int64_t r = 0; r < n; ++r) {
        if (plan.group_rank(r, kind) != 0) continue;  // visit each group once, from its first member
        const int32_t id = multisets(classes_in_group(plan, r, kind, color));
        for (int64_t i = 0; i < plan.group_size(kind); ++i) group_multiset[static_cast<size_t>(plan.member(r, kind, i))] = id;
      }
      for (int64_t r = 0; r < n; ++r) signature[static_cast<size_t>(r)].push_back(group_multiset[static_cast<size_t>(r)]);
    }
    Numbering<std::vector<int32_t>> refined;
    for (int64_t r = 0; r < n; ++r) color[static_cast<size_t>(r)] = refined(signature[static_cast<size_t>(r)]);
    // Refinement only splits classes; when none split, the partition is stable.
    if (refined.size() == num_classes) break;
    num_classes = refined.size();
  }

  RankClasses out;
  out.class_of = color;
  out.members.resize(static_cast<size_t>(num_classes));
  for (int64_t r = 0; r < n; ++r) out.members[static_cast<size_t>(color[static_cast<size_t>(r)])].push_back(static_cast<int32_t>(r));
  for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
    auto& gc = out.group_classes[static_cast<size_t>(kind)];
    gc.resize(static_cast<size_t>(num_classes));
    for (int32_t c = 0; c < num_classes; ++c) {
      const int32_t rep = out.representative(c);
      for (const auto& [cls, count] : classes_in_group(plan, plan.group_id(rep, kind), kind, color)) {
        gc[static_cast<size_t>(c)].push_back(cls);
      }
    }
  }
  return out;
}

}  // namespace moesim
