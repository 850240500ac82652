// SPDX-License-Identifier: MIT
#include "graph/graph_checks.hpp"

#include "graph/queues.hpp"

#include <array>
#include <map>
#include <tuple>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/topological_sort.hpp>

namespace moesim {

std::vector<std::string> check_acyclic(const Program& p) {
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(p.ops.size());
  std::array<int64_t, 3> last_on_stream{-1, -1, -1};
  for (size_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    auto& prev = last_on_stream[static_cast<size_t>(op.stream)];
    if (prev >= 0) boost::add_edge(static_cast<size_t>(prev), i, g);
    prev = static_cast<int64_t>(i);
    for (uint32_t d : p.deps_of(op)) boost::add_edge(d, i, g);
  }
  std::vector<size_t> order;
  try {
    boost::topological_sort(g, std::back_inserter(order));
  } catch (const boost::not_a_dag&) {
    return {"program " + std::to_string(p.stage) + ": dependencies form a cycle"};
  }
  return {};
}

std::vector<std::string> check_memory_balance(const Program& p) {
  enum class State { unborn, device, host, dead };
  std::vector<State> state(p.buffers.size(), State::unborn);
  std::vector<std::string> errors;
  auto fail = [&](const Op& op, const MemEffect& e, const std::string& what) {
    if (errors.size() < 20) {
      errors.push_back(p.name_of(op) + ": buffer " + p.names[p.buffers[e.buffer].name] + " " + what);
    }
  };
  for (const Op& op : p.ops) {
    for (const MemEffect& e : p.effects_of(op)) {
      State& s = state[e.buffer];
      switch (e.action) {
        case MemAction::alloc:
          if (s != State::unborn) fail(op, e, "allocated twice");
          s = State::device;
          break;
        case MemAction::free:
          if (s != State::device) fail(op, e, "freed while not on the device");
          s = State::dead;
          break;
        case MemAction::to_host:
          if (s != State::device) fail(op, e, "swapped out while not on the device");
          s = State::host;
          break;
        case MemAction::to_device:
          if (s != State::host) fail(op, e, "swapped in while not on the host");
          s = State::device;
          break;
      }
    }
  }
  for (size_t b = 0; b < state.size(); ++b) {
    if (state[b] == State::device || state[b] == State::host) {
      if (errors.size() < 20) errors.push_back("buffer " + p.names[p.buffers[b].name] + " is never freed");
    }
  }
  return errors;
}

std::vector<std::string> check_memory_order(const Program& p) {
  const std::vector<QueueClock> clock = ordering_clocks(p);
  const std::vector<int32_t> place = queue_places(p);
  std::vector<int64_t> last(p.buffers.size(), -1);  // op of each buffer's latest effect
  std::vector<std::string> errors;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const Op& op = p.ops[i];
    for (const MemEffect& e : p.effects_of(op)) {
      const int64_t prev = last[e.buffer];
      last[e.buffer] = i;
      if (prev < 0 || prev == i) continue;
      const Op& before = p.ops[static_cast<size_t>(prev)];
      if (clock[i][static_cast<size_t>(queue_of(before))] >= place[static_cast<size_t>(prev)]) continue;
      if (errors.size() < 20) {
        errors.push_back(p.name_of(op) + ": buffer " + p.names[p.buffers[e.buffer].name] + " " +
                         std::string(enum_name(e.action)) + " is not ordered after " + p.name_of(before));
      }
    }
  }
  return errors;
}

namespace {

struct Message {
  int64_t micro;
  double bytes;
  friend bool operator==(const Message&, const Message&) = default;
};

}  // namespace

std::vector<std::string> check_p2p_matching(const StepGraph& g) {
  std::vector<std::string> errors;
  // (group kind, from program, to program, offset from the sender, what it carries) -> messages in
  // order: one channel, whose sends and receives each end issues in order on one queue.
  std::map<std::tuple<GroupKind, int64_t, int64_t, int, int>, std::vector<Message>> sent, received;
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) {
      if (!is_p2p(op.kind)) continue;
      const int64_t peer = op.group == GroupKind::pp ? p.stage + op.peer_offset : p.stage;
      if (op.group == GroupKind::pp && (peer < 0 || peer >= g.plan.num_programs())) continue;
      if (op.kind == OpKind::send) {
        sent[{op.group, p.stage, peer, op.peer_offset, p2p_carries(op)}].push_back({op.micro, op.comm_bytes});
      } else {
        received[{op.group, peer, p.stage, -op.peer_offset, p2p_carries(op)}].push_back({op.micro, op.comm_bytes});
      }
    }
  }
  for (const auto& [key, msgs] : sent) {
    auto it = received.find(key);
    if (it == received.end() || it->second != msgs) {
      errors.push_back(std::string(enum_name(std::get<0>(key))) + " messages from program " + std::to_string(std::get<1>(key)) +
                       " to " + std::to_string(std::get<2>(key)) + " do not match the receives");
    }
  }
  for (const auto& [key, msgs] : received) {
    if (!sent.contains(key)) {
      errors.push_back(std::string(enum_name(std::get<0>(key))) + " receives in program " + std::to_string(std::get<2>(key)) +
                       " have no matching sends");
    }
  }
  return errors;
}

std::vector<std::string> check_collective_order(const StepGraph& g) {
  std::vector<std::string> errors;
  // Collectives of each group kind, per program; groups whose members span programs must agree.
  auto sequence = [](const Program& p, GroupKind kind) {
    std::vector<std::tuple<OpKind, int32_t, double>> out;
    for (const Op& op : p.ops) {
      if (is_collective(op.kind) && op.group == kind) out.emplace_back(op.kind, op.micro, op.comm_bytes);
    }
    return out;
  };
  for (const auto& [name, kind] : EnumNames<GroupKind>::names) {
    for (int64_t rank = 0; rank < g.plan.num_ranks(); rank += std::max<int64_t>(1, g.plan.num_ranks() / 64)) {
      const int64_t program = g.plan.program_of(rank);
      const auto mine = sequence(g.programs[static_cast<size_t>(program)], kind);
      for (int64_t i = 0; i < g.plan.group_size(kind); ++i) {
        const int64_t other = g.plan.program_of(g.plan.member(rank, kind, i));
        if (other == program) continue;
        if (sequence(g.programs[static_cast<size_t>(other)], kind) != mine) {
          errors.push_back(std::string(name) + " group of rank " + std::to_string(rank) +
                           ": members run different collective sequences");
        }
      }
    }
  }
  return errors;
}

std::vector<std::string> check_step_graph(const StepGraph& graph) {
  std::vector<std::string> all;
  auto add = [&](std::vector<std::string> v) { all.insert(all.end(), v.begin(), v.end()); };
  for (const Program& p : graph.programs) {
    add(check_acyclic(p));
    add(check_memory_balance(p));
    add(check_memory_order(p));
  }
  add(check_p2p_matching(graph));
  add(check_collective_order(graph));
  return all;
}

}  // namespace moesim
