// SPDX-License-Identifier: MIT
// Timeline writers: a Chrome trace-event JSON of the ops each rank ran, and a CSV of memory in use.
//
// The trace opens in ui.perfetto.dev and chrome://tracing. Layout:
//   - one process per rank, named "rank N (program P)"; pid = rank + 1, because Perfetto treats
//     pid 0 as the kernel's swapper process;
//   - one thread per stream the rank used (compute, comm, copy), named by metadata events;
//     tid = 10 * pid + 1 + stream, unique across the trace since Perfetto keys threads by tid;
//   - one complete event ("ph":"X") per ExecRecord: name = the op's name, cat = its kind, args =
//     {phase, layer, micro, flops, bytes, group}; bytes is HBM traffic (read + written) for
//     kernels and comm_bytes (nccl-tests size, p2p or copied bytes) for communication and host
//     copies; group is written for communication ops (collectives and send / recv); routed ops
//     add what the routing draw made of them (ExecRecord::routed): a grouped GEMM's rows and
//     rows_expected (the graph's), an expert all-to-all's routed_bytes;
//   - one counter event ("ph":"C", name "memory") per MemorySample, args {hbm_GB, ddr_GB,
//     hbm_reserved_GB} (GB = 1e9 bytes): live bytes, and what the allocator holds (the report's
//     peak is the largest hbm_reserved).
// ts and dur are microseconds written exactly from integer picoseconds (1234567 ps -> 1.234567),
// trailing zeros dropped. Caveat: Perfetto keeps nanoseconds, so sub-nanosecond durations show as 0.
//
// Writing is plain string building, one event per line, in timeline order: a 128-rank timeline
// holds millions of records (about 0.2 KB of JSON each). The output depends only on the inputs.
// Records that do not fit the graph (rank, program or op out of range, a program other than the
// rank's, end before start) and non-finite numbers are caller bugs: std::invalid_argument.
#pragma once

#include <cstdint>
#include <string>

#include "graph/timeline.hpp"
#include "graph/step_graph.hpp"

namespace moesim {

struct TraceOptions {
  // Ranks 0 .. max_ranks - 1 are written; the others are left out (a 128-rank trace of 2.6M ops is
  // too big for the UI), which a metadata event "ranks_left_out" and otherData say.
  int64_t max_ranks = 16;
};

std::string chrome_trace_json(const StepGraph& graph, const Timeline& timeline, const TraceOptions& options = {});

// "rank,time_s,hbm_bytes,ddr_bytes,hbm_reserved_bytes", then one line per MemorySample in timeline order; time_s is
// exact (picoseconds as a decimal), bytes are the shortest decimal that reads back the same double.
std::string memory_csv(const Timeline& timeline);

}  // namespace moesim
