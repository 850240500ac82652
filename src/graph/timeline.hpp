// SPDX-License-Identifier: MIT
// Timeline: what a simulation (or a GPU run) did, op by op, for reports and traces.
// Times are integer picoseconds from the start of the step.
#pragma once

#include <cstdint>
#include <vector>

#include "graph/op.hpp"

namespace moesim {

using Picoseconds = int64_t;

// One op execution on one rank.
struct ExecRecord {
  int32_t rank = 0;
  int32_t program = 0;   // index into StepGraph::programs
  uint32_t op = 0;       // index into that program's ops
  Stream stream = Stream::compute;
  Picoseconds start = 0;
  Picoseconds end = 0;
  // A routed op as the routing draw sized it: a grouped GEMM's rows (capacity, skew and
  // local-first show here), an expert all-to-all's bytes; -1: the op as built.
  double routed = -1;
};

// Memory in use on one rank right after an op's effects, per tier.
struct MemorySample {
  int32_t rank = 0;
  Picoseconds time = 0;
  double hbm_bytes = 0;           // live: persistent state and the tensors alive now
  double ddr_bytes = 0;
  double hbm_reserved_bytes = 0;  // what the allocator holds (RankMemoryLedger::reserved_hbm_bytes)
};

struct Timeline {
  std::vector<ExecRecord> records;        // ordered by start time, then rank, then stream
  std::vector<MemorySample> memory;       // ordered by rank, then time
  Picoseconds step_end = 0;
};

}  // namespace moesim

namespace moesim {

// A hash of the event sequence (FNV-1a over rank, op, queue, start and end of every record, in
// order): any change of behaviour changes it. Golden tests pin it per scenario.
inline uint64_t fingerprint(const Timeline& t) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint64_t v) {
    for (int i = 0; i < 8; ++i) {
      h ^= (v >> (8 * i)) & 0xff;
      h *= 1099511628211ull;
    }
  };
  for (const ExecRecord& r : t.records) {
    mix(static_cast<uint64_t>(r.rank));
    mix(r.op);
    mix(static_cast<uint64_t>(r.stream));
    mix(static_cast<uint64_t>(r.start));
    mix(static_cast<uint64_t>(r.end));
  }
  return h;
}

}  // namespace moesim
