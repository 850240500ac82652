// SPDX-License-Identifier: MIT
// A step graph that can never finish, for the tests of how a deadlock is reported: two pipeline
// stages whose sends each wait for the other's receive to complete first (the classic cycle of
// blocking point-to-point).
#pragma once

#include "graph/program.hpp"
#include "graph/step_graph.hpp"

namespace moesim::test {

inline StepGraph two_stage_deadlock() {
  StepGraph g;
  g.plan = ParallelPlan(MeshShape{2, 1, 1, 1, 1, 1});
  g.tokens_per_micro_batch = 1;
  for (int64_t stage = 0; stage < 2; ++stage) {
    Program p;
    p.stage = stage;
    ProgramWriter w(p);
    Op recv;
    recv.kind = OpKind::recv;
    recv.stream = Stream::comm;
    recv.group = GroupKind::pp;
    recv.phase = stage == 0 ? Phase::bwd : Phase::fwd;
    recv.peer_offset = stage == 0 ? 1 : -1;
    recv.comm_bytes = 1e6;
    const uint32_t r = w.add(recv, stage == 0 ? "pp_recv.gradient" : "pp_recv.activation");
    Op send = recv;
    send.kind = OpKind::send;
    send.phase = stage == 0 ? Phase::fwd : Phase::bwd;
    const uint32_t s = w.add(send, stage == 0 ? "pp_send.activation" : "pp_send.gradient");
    w.order_after(s, r);
    g.programs.push_back(std::move(p));
  }
  return g;
}

}  // namespace moesim::test
