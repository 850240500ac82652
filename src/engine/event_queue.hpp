// SPDX-License-Identifier: MIT
// The engine's event queue: a binary heap on (time, sequence number). Events at the same time
// come out in the order they were pushed (a FIFO for the current instant: zero-delay hops are the
// norm in an op graph), so every run is deterministic. Events are small structs in one array; no
// allocation per event once the heap has grown.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include "graph/timeline.hpp"

namespace moesim {

enum class EventKind : uint8_t { op_done, transfer_start, flow_done, op_issued };

struct Event {
  Picoseconds time;
  uint64_t seq;
  EventKind kind;
  int32_t rank;       // the slot (simulated rank) it concerns
  uint32_t id;        // op index, or flow index
  uint64_t version;   // flow_done: stale when the flow's version moved on

  bool operator>(const Event& o) const { return time != o.time ? time > o.time : seq > o.seq; }
};

class EventQueue {
 public:
  void push(Picoseconds time, EventKind kind, int32_t slot, uint32_t id, uint64_t version = 0) {
    heap_.push(Event{time, next_seq_++, kind, slot, id, version});
  }
  bool empty() const { return heap_.empty(); }
  Picoseconds next_time() const { return heap_.top().time; }
  Event pop() {
    const Event e = heap_.top();
    heap_.pop();
    return e;
  }
  void clear() {
    heap_ = {};
    next_seq_ = 0;
  }

 private:
  std::priority_queue<Event, std::vector<Event>, std::greater<>> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace moesim
