// SPDX-License-Identifier: MIT
#include "backend/rank_bootstrap.hpp"

#include <algorithm>
#include <array>
#include <map>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "graph/queues.hpp"

namespace moesim::cuda {

ProcessPlacement place_process(const std::vector<int>& node_leaders, int rank) {
  if (rank < 0 || rank >= static_cast<int>(node_leaders.size())) throw std::logic_error("place_process: rank outside the job");
  ProcessPlacement p;
  p.rank = rank;
  p.size = static_cast<int>(node_leaders.size());
  std::map<int, int> node_index;  // leader -> node, numbered by first appearance in rank order
  std::vector<int> count;         // processes seen so far per node
  for (int r = 0; r < p.size; ++r) {
    const auto [it, added] = node_index.try_emplace(node_leaders[static_cast<size_t>(r)], static_cast<int>(count.size()));
    if (added) count.push_back(0);
    const int node = it->second;
    p.node_of.push_back(node);
    if (r == rank) {
      p.node = node;
      p.local_rank = count[static_cast<size_t>(node)];
    }
    ++count[static_cast<size_t>(node)];
  }
  p.num_nodes = static_cast<int>(count.size());
  p.local_size = count[static_cast<size_t>(p.node)];
  return p;
}

ProcessPlacement place_process(Distributed& job) {
  const std::vector<std::string> all = job.all_gather(std::to_string(job.node_leader()));
  std::vector<int> leaders;
  for (const std::string& s : all) leaders.push_back(std::stoi(s));
  return place_process(leaders, job.rank());
}

int device_of(const ProcessPlacement& p, int visible_gpus, const std::string& where) {
  if (visible_gpus >= p.local_size) return p.local_rank;
  if (visible_gpus == 1) return 0;  // each process was given its own GPU (checked by check_distinct_devices)
  throw InputError(where, "",
                   "node " + std::to_string(p.node) + " runs " + std::to_string(p.local_size) + " process(es) but " +
                       std::to_string(visible_gpus) +
                       " GPU(s) are visible to each: one GPU per process (start fewer processes per node, or give each "
                       "process one GPU through CUDA_VISIBLE_DEVICES)");
}

void check_distinct_devices(Distributed& job, const ProcessPlacement& p, const std::string& device_id, const std::string& where) {
  const std::vector<std::string> ids = job.all_gather(device_id);
  std::map<std::pair<int, std::string>, int> first;  // (node, device) -> first rank driving it
  for (int r = 0; r < static_cast<int>(ids.size()); ++r) {
    const auto [it, added] = first.try_emplace({p.node_of[static_cast<size_t>(r)], ids[static_cast<size_t>(r)]}, r);
    if (!added) {
      throw InputError(where, "",
                       "ranks " + std::to_string(it->second) + " and " + std::to_string(r) + " would drive the same GPU (" +
                           ids[static_cast<size_t>(r)] + ") on node " + std::to_string(p.node_of[static_cast<size_t>(r)]) +
                           ": one GPU per process");
    }
  }
}

int communicator_of(const Op& op) {
  const int q = queue_of(op);
  return q >= 2 ? q : 2 + static_cast<int>(op.group);
}

std::tuple<int, int64_t, int64_t> pipeline_link(const StepGraph& g, int64_t rank, const Op& op) {
  const int64_t index = g.plan.group_rank(rank, op.group) + op.peer_offset;
  if (index < 0 || index >= g.plan.group_size(op.group)) return {0, -1, -1};
  const int64_t peer = g.plan.member(rank, op.group, index);
  const int channel = op.phase == Phase::fwd ? 0 : 1;
  return op.kind == OpKind::send ? std::tuple{channel, rank, peer} : std::tuple{channel, peer, rank};
}

std::vector<CommunicatorInstance> plan_communicators(const StepGraph& g) {
  const int64_t n = g.plan.num_ranks();
  std::vector<CommunicatorInstance> out;
  // Pipeline links, in the order rank 0, 1, ... meet them in their programs.
  std::set<std::tuple<int, int64_t, int64_t>> seen;
  for (int64_t r = 0; r < n; ++r) {
    for (const Op& op : g.programs[static_cast<size_t>(g.plan.program_of(r))].ops) {
      if (!is_pipeline_p2p(op)) continue;
      const auto link = pipeline_link(g, r, op);
      if (std::get<1>(link) < 0 || !seen.insert(link).second) continue;
      out.push_back(CommunicatorInstance{-1, link, {std::get<1>(link), std::get<2>(link)}});
    }
  }
  // Group communicators, per queue, per group instance by group id.
  std::array<bool, kNumQueues> used{};
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) {
      if (is_communication(op.kind) && !is_pipeline_p2p(op)) used[static_cast<size_t>(communicator_of(op))] = true;
    }
  }
  for (int q = 2; q < kFirstPipelineQueue; ++q) {
    const GroupKind kind = queue_group(q);
    if (!used[static_cast<size_t>(q)] || g.plan.group_size(kind) <= 1) continue;
    std::map<int64_t, std::vector<int64_t>> groups;
    for (int64_t r = 0; r < n; ++r) groups.try_emplace(g.plan.group_id(r, kind), g.plan.members(r, kind));
    for (auto& [id, members] : groups) out.push_back(CommunicatorInstance{q, {}, std::move(members)});
  }
  return out;
}

void agree_on_input(Distributed& job, const std::function<void()>& check) {
  // An error travels as "F" file \0 path \0 message; success as an empty string.
  std::string mine;
  try {
    check();
  } catch (const InputError& e) {
    mine = "F" + e.file() + '\0' + e.path() + '\0' + e.message();
  }
  for (const std::string& theirs : job.all_gather(mine)) {
    if (theirs.empty()) continue;
    const size_t a = theirs.find('\0', 1);
    const size_t b = theirs.find('\0', a + 1);
    if (a == std::string::npos || b == std::string::npos) throw std::runtime_error("agree_on_input: a malformed error");
    throw InputError(theirs.substr(1, a - 1), theirs.substr(a + 1, b - a - 1), theirs.substr(b + 1));
  }
}

std::vector<std::string> share_ids(Distributed& job, size_t count, const std::function<std::string()>& make_id) {
  std::string packed;
  size_t id_size = 0;
  if (job.rank() == 0) {
    for (size_t i = 0; i < count; ++i) {
      const std::string id = make_id();
      if (i == 0) id_size = id.size();
      if (id.size() != id_size || id.empty()) throw std::logic_error("share_ids: ids must be non-empty and of one size");
      packed += id;
    }
  }
  job.broadcast(packed, 0);
  if (count == 0) return {};
  if (packed.size() % count != 0) throw std::runtime_error("share_ids: the broadcast ids do not divide evenly");
  id_size = packed.size() / count;
  std::vector<std::string> ids;
  for (size_t i = 0; i < count; ++i) ids.push_back(packed.substr(i * id_size, id_size));
  return ids;
}

std::vector<CollectiveLayout> collective_layouts(const ProcessPlacement& p) {
  std::vector<std::vector<int>> ranks_of(static_cast<size_t>(p.num_nodes));  // per node, in rank order
  for (int r = 0; r < static_cast<int>(p.node_of.size()); ++r) ranks_of[static_cast<size_t>(p.node_of[static_cast<size_t>(r)])].push_back(r);
  size_t largest = 0, smallest = p.node_of.size();
  for (const auto& rs : ranks_of) {
    largest = std::max(largest, rs.size());
    smallest = std::min(smallest, rs.size());
  }
  std::vector<CollectiveLayout> out;
  for (size_t n = 2; n <= largest; n *= 2) {
    CollectiveLayout l{false, static_cast<int>(n), 1, static_cast<int>(n), {}};
    for (const auto& rs : ranks_of) {
      if (rs.size() >= n) l.groups.emplace_back(rs.begin(), rs.begin() + static_cast<std::ptrdiff_t>(n));
    }
    out.push_back(std::move(l));
  }
  if (p.num_nodes >= 2) {
    for (size_t per = 1; per <= smallest; per *= 2) {
      CollectiveLayout l{true, static_cast<int>(per) * p.num_nodes, p.num_nodes, static_cast<int>(per), {{}}};
      for (const auto& rs : ranks_of) l.groups[0].insert(l.groups[0].end(), rs.begin(), rs.begin() + static_cast<std::ptrdiff_t>(per));
      std::sort(l.groups[0].begin(), l.groups[0].end());
      out.push_back(std::move(l));
    }
  }
  return out;
}

}  // namespace moesim::cuda
