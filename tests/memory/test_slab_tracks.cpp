// SPDX-License-Identifier: MIT
// Ledgers that share their slabs (slab_tracks.hpp) report what ledgers with slabs of their own
// report, rank by rank: on random programs whose ranks run some ops at other times (so that their
// effects come in other orders and instants), every rank's slab, reserve and peak are the same
// numbers, and ranks with the same times share one track. A buffer placed twice still throws.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <stdexcept>
#include <tuple>
#include <vector>

#include "memory/rank_memory.hpp"

using namespace moesim;

namespace {

// Op i allocates one buffer at its start and, at its end, frees a live buffer allocated 1-4 ops
// before it.
Program random_program(std::mt19937_64& rng, uint32_t num_ops) {
  Program p;
  ProgramWriter w(p);
  std::uniform_real_distribution<double> bytes(1, 20000);
  std::vector<uint32_t> live;
  for (uint32_t i = 0; i < num_ops; ++i) {
    const uint32_t b = w.buffer(bytes(rng), MemCategory::activation, "b" + std::to_string(i));
    const uint32_t op = w.add(Op{}, "op" + std::to_string(i));
    w.effect(op, b, MemAction::alloc);
    if (live.size() >= 4 || (!live.empty() && rng() % 2 == 0)) {
      const size_t k = rng() % std::min<size_t>(live.size(), 4);
      w.effect(op, live[live.size() - 1 - k], MemAction::free);
      live.erase(live.end() - 1 - static_cast<std::ptrdiff_t>(k));
    }
    live.push_back(b);
  }
  return p;
}

// One rank's run: op i starts at 10 i plus its jitter (0-4) and lasts 1-12 ticks, so ops overlap
// and instants coincide; the ledger sees each start and end in time order.
RankMemory run(const Program& p, const std::vector<int>& jitter, const std::vector<int>& length, SlabTracks* shared) {
  struct Event {
    int64_t t;
    bool start;
    uint32_t op;
  };
  std::vector<Event> events;
  for (uint32_t i = 0; i < p.ops.size(); ++i) {
    const int64_t s = 10 * int64_t{i} + jitter[i];
    events.push_back({s, true, i});
    events.push_back({s + length[i], false, i});
  }
  std::stable_sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.t, a.start) < std::tie(b.t, b.start);  // ends before starts at one instant
  });
  RankMemoryLedger m(1000);
  if (shared) m.share(shared);
  for (const Event& e : events) m.apply(p, p.ops[e.op], e.op, e.start, e.t);
  return m.finish(0.05);
}

}  // namespace

TEST_CASE("shared slab tracks give every rank the slab of its own") {
  std::mt19937_64 rng(17);
  int forked = 0;  // trials whose ranks did not all share one track
  for (int trial = 0; trial < 20; ++trial) {
    const Program p = random_program(rng, 300);
    // Four timing patterns over 16 ranks; the patterns differ in a few ops only, as sampled
    // expert loads move a few ops.
    std::vector<std::vector<int>> jitter(4, std::vector<int>(p.ops.size())), length(4, std::vector<int>(p.ops.size()));
    for (size_t i = 0; i < p.ops.size(); ++i) {
      jitter[0][i] = static_cast<int>(rng() % 5);
      length[0][i] = 1 + static_cast<int>(rng() % 12);
    }
    for (size_t k = 1; k < 4; ++k) {
      jitter[k] = jitter[0];
      length[k] = length[0];
      for (int c = 0; c < 5; ++c) length[k][rng() % p.ops.size()] = 1 + static_cast<int>(rng() % 12);
    }
    SlabTracks tracks;
    for (int rank = 0; rank < 16; ++rank) {
      const size_t k = static_cast<size_t>(rank) % 4;
      const RankMemory own = run(p, jitter[k], length[k], nullptr);
      const RankMemory shared = run(p, jitter[k], length[k], &tracks);
      INFO("trial " << trial << " rank " << rank);
      CHECK(own.slab_bytes > 0);
      CHECK(shared.slab_bytes == own.slab_bytes);
      CHECK(shared.allocator_reserve_bytes == own.allocator_reserve_bytes);
      CHECK(shared.peak_hbm_bytes == own.peak_hbm_bytes);
    }
    CHECK(tracks.num_tracks() <= 4);  // one per timing pattern at most, however many ranks
    forked += tracks.num_tracks() > 1;
  }
  CHECK(forked >= 10);  // the patterns do reorder effects: forks were exercised
}

TEST_CASE("a buffer placed twice throws through shared tracks") {
  Program p;
  ProgramWriter w(p);
  const uint32_t b = w.buffer(1000, MemCategory::activation, "x");
  const uint32_t a = w.add(Op{}, "first");
  w.effect(a, b, MemAction::alloc);
  const uint32_t again = w.add(Op{}, "second");
  w.effect(again, b, MemAction::alloc);
  SlabTracks tracks;
  RankMemoryLedger m;
  m.share(&tracks);
  m.apply(p, p.ops[a], a, true, 1);
  m.apply(p, p.ops[again], again, true, 2);  // the first instant is placed now
  CHECK_THROWS_WITH_AS(m.finish(0), "buffer 'x' placed again by op 'second'", std::logic_error);
}
