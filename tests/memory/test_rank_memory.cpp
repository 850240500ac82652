// SPDX-License-Identifier: MIT
// RankMemoryLedger against hand-computed sequences: allocation at an op's start, release at its
// end, a swap holding both copies while it runs, the peak by category, the allocator's reserve
// (the slab the tensors were placed in, beyond the live tensors, + fragmentation x the slab).
#include <doctest/doctest.h>

#include "memory/rank_memory.hpp"

using namespace moesim;

TEST_CASE("alloc, swap out and back, free: HBM and DDR at each step, the peak and what it held") {
  Program p;
  ProgramWriter w(p);
  const uint32_t act = w.buffer(1000, MemCategory::activation, "act");
  const uint32_t ws = w.buffer(300, MemCategory::workspace, "ws");
  Op op;
  const uint32_t produce = w.add(op, "produce");
  w.effect(produce, act, MemAction::alloc);
  w.effect(produce, ws, MemAction::alloc);
  const uint32_t drop_ws = w.add(op, "drop_ws");
  w.effect(drop_ws, ws, MemAction::free);
  const uint32_t out = w.add(op, "swap_out");
  w.effect(out, act, MemAction::to_host);
  const uint32_t in = w.add(op, "swap_in");
  w.effect(in, act, MemAction::to_device);
  const uint32_t consume = w.add(op, "consume");
  w.effect(consume, act, MemAction::free);

  RankMemoryLedger m(1000);
  m.apply(p, p.ops[produce], produce, true, 1);
  CHECK(m.hbm_bytes() == 2300);
  m.apply(p, p.ops[produce], produce, false, 2);
  m.apply(p, p.ops[drop_ws], drop_ws, true, 3);
  m.apply(p, p.ops[drop_ws], drop_ws, false, 4);
  CHECK(m.hbm_bytes() == 2000);
  m.apply(p, p.ops[out], out, true, 5);  // copying: both copies exist
  CHECK(m.hbm_bytes() == 2000);
  CHECK(m.ddr_bytes() == 1000);
  m.apply(p, p.ops[out], out, false, 6);
  CHECK(m.hbm_bytes() == 1000);
  m.apply(p, p.ops[in], in, true, 7);
  CHECK(m.hbm_bytes() == 2000);
  CHECK(m.ddr_bytes() == 1000);
  m.apply(p, p.ops[in], in, false, 8);
  CHECK(m.ddr_bytes() == 0);
  m.apply(p, p.ops[consume], consume, true, 9);
  m.apply(p, p.ops[consume], consume, false, 10);

  const RankMemory r = m.finish(0.1);
  CHECK(r.final_hbm_bytes == 1000);
  CHECK(r.min_hbm_bytes == 1000);
  CHECK(r.peak_ddr_bytes == 1000);
  CHECK(r.peak_time == 1);
  CHECK(r.peak_op == produce);
  CHECK(r.peak_transient[static_cast<size_t>(MemCategory::activation)] == 1000);
  CHECK(r.peak_transient[static_cast<size_t>(MemCategory::workspace)] == 300);
  // Blocks of 1024 and 512 bytes (512-byte granules); the swapped-in copy reuses the first.
  CHECK(r.slab_bytes == 1536);
  CHECK(r.allocator_reserve_bytes == doctest::Approx(1536 - 1300 + 0.1 * 1536));
  CHECK(r.peak_hbm_bytes == doctest::Approx(1000 + 1536 + 0.1 * 1536));
}

TEST_CASE("the slab takes one instant at a time: a release at a later instant is not reused earlier") {
  // X lives from op 0 to op 1's end (t = 20); Y is allocated at op 2's start (t = 10), while X is
  // still in HBM, so Y needs memory of its own even though op 1 precedes op 2 in program order.
  // An op without effects at t = 20 (op 3) must not merge the two instants.
  Program p;
  ProgramWriter w(p);
  const uint32_t x = w.buffer(4096, MemCategory::activation, "x");
  const uint32_t y = w.buffer(4096, MemCategory::activation, "y");
  Op op;
  const uint32_t make_x = w.add(op, "make_x");
  w.effect(make_x, x, MemAction::alloc);
  const uint32_t drop_x = w.add(op, "drop_x");
  w.effect(drop_x, x, MemAction::free);
  const uint32_t make_y = w.add(op, "make_y");
  w.effect(make_y, y, MemAction::alloc);
  w.effect(make_y, y, MemAction::free);
  const uint32_t idle = w.add(op, "idle");

  RankMemoryLedger m(0);
  m.apply(p, p.ops[make_x], make_x, true, 0);
  m.apply(p, p.ops[make_x], make_x, false, 5);
  m.apply(p, p.ops[drop_x], drop_x, true, 5);
  m.apply(p, p.ops[make_y], make_y, true, 10);
  m.apply(p, p.ops[idle], idle, true, 20);
  m.apply(p, p.ops[drop_x], drop_x, false, 20);
  m.apply(p, p.ops[make_y], make_y, false, 30);
  m.apply(p, p.ops[idle], idle, false, 30);
  CHECK(m.finish(0).slab_bytes == 2 * 4096);
}
