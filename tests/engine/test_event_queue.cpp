// SPDX-License-Identifier: MIT
// The event queue's order is (time, push order), the engine's determinism: random pushes and pops,
// many of them for the instant being processed (zero delay) and many for equal later times, come
// out exactly as a plain sort of the same events.
#include <doctest/doctest.h>

#include <algorithm>
#include <random>
#include <tuple>
#include <vector>

#include "engine/event_queue.hpp"

using namespace moesim;

TEST_CASE("same instant: pushed first, popped first, whenever it was pushed") {
  EventQueue q;
  q.push(5, EventKind::op_done, 0, 1);  // time 5 is in the future
  q.push(5, EventKind::op_done, 0, 2);
  q.push(0, EventKind::op_done, 0, 3);  // the current instant
  CHECK(q.pop().id == 3);
  CHECK(q.pop().id == 1);  // now at 5
  q.push(5, EventKind::op_done, 0, 4);  // zero delay: after 2, which was pushed before it
  q.push(7, EventKind::op_done, 0, 5);
  q.push(5, EventKind::op_done, 0, 6);
  CHECK(q.pop().id == 2);
  CHECK(q.pop().id == 4);
  CHECK(q.pop().id == 6);
  CHECK(q.pop().id == 5);
  CHECK(q.empty());
}

TEST_CASE("random pushes and pops come out in (time, push order), as a sort of them") {
  for (uint64_t seed : {1, 2, 3, 4}) {
    std::mt19937_64 rng(seed);
    EventQueue q;
    std::vector<std::tuple<Picoseconds, uint32_t>> pushed;  // (time, id): id is the push order
    std::vector<std::tuple<Picoseconds, uint32_t>> popped;
    Picoseconds now = 0;
    uint32_t next_id = 0;
    auto push = [&](Picoseconds t) {
      q.push(t, EventKind::op_done, 0, next_id);
      pushed.emplace_back(t, next_id++);
    };
    for (int i = 0; i < 8; ++i) push(static_cast<Picoseconds>(rng() % 4));
    while (!q.empty()) {
      const Event e = q.pop();
      CHECK(e.time >= now);
      now = e.time;
      popped.emplace_back(e.time, e.id);
      // Handling an event pushes 0-3 more: half at this instant, the rest a little later
      // (often at equal times, so ties across pushes made at different instants are common).
      if (next_id < 20000) {
        const int n = static_cast<int>(rng() % 4);
        for (int k = 0; k < n; ++k) push(now + (rng() % 2 ? 0 : static_cast<Picoseconds>(1 + rng() % 3)));
      }
    }
    std::sort(pushed.begin(), pushed.end());
    CHECK(popped == pushed);
  }
}

TEST_CASE("clear forgets every event and restarts the push order at 0") {
  EventQueue q;
  q.push(3, EventKind::op_done, 0, 1);
  q.push(0, EventKind::op_done, 0, 2);
  CHECK(q.pop().id == 2);
  q.clear();
  CHECK(q.empty());
  q.push(2, EventKind::op_done, 0, 7);
  q.push(0, EventKind::op_done, 0, 8);
  const Event first = q.pop();
  CHECK(first.id == 8);
  CHECK(first.seq == 1);
  CHECK(q.pop().id == 7);
}
