// SPDX-License-Identifier: MIT
// Fitting a calibration file (docs/calibration/format.md) to matched profiler traces: every op
// the trace measured becomes one point in the table the cost model reads for that op, at the
// op's own size measure, so the cost model gives back the measured time for that op:
//
//   table                 op                                   x (size measure)     y
//   kernels/gemm          BF16 gemm, lora_gemm, router, ...    min(m, n, k)         flops / (t - launch)
//   kernels/cce/PASS      BF16 cce_loss (PASS: CcePass)        hidden size (op.k)   flops / (t - launch)
//   kernels/grouped_gemm  BF16 grouped_gemm                    rows per group       flops / (t - launch)
//   attention/KIND/PHASE  BF16 flash_attention, ...            query rows (op.m)    flops / (t - launch)
//   kernels/memory        every other kernel (norms, elementwise, permute, loss, optimizer)
//                                                              bytes read + written bytes / (t - launch)
//   kernels/memory_by_kind/KIND/PASS       the same, by kind and pass
//   kernels/memory_by_kind/norm:W/PASS     norms that normalise rows of W elements
//   collectives/KIND/N    collectives over N > 1 ranks         nccl-tests size      busbw = factor x size / t
//
// t is the op's measured GPU time (its kernels' durations summed), launch the hardware file's
// kernel_launch_overhead, which the cost model adds to every kernel. On a hardware file with a power
// model, compute-bound y is divided by the traced step's rate for its class (TraceFitSource::power). Where several ops share an
// x, the point is their total work over their total time (so they keep their summed time). The
// cost model reads the narrowest memory table it has for an op (its norm width's, its kind's,
// then kernels/memory). Caveat: sizes outside the measured range are clamped to the end points.
#pragma once

#include <string>
#include <vector>

#include "cost/cost_model.hpp"
#include "graph/step_graph.hpp"
#include "trace/trace_match.hpp"

namespace moesim {

struct TraceFitSource {
  const TraceMatch* match = nullptr;
  const StepGraph* graph = nullptr;
  const CostModel* cost = nullptr;  // the scenario's (curve_of, the launch overhead)
  std::string scenario;              // for provenance
  // The power state the traced step ran in (measured_power_state of measured_activity, where the
  // hardware file has a power model): compute-bound points are divided by its rates, so that the
  // tables hold what the kernels run at back to back at the limit, as every other table does.
  PowerState power;
};

// What the traced step's GPU did, per step, in the power model's classes: each op's kernels by its
// class (collectives and copies as memory-bound work), idle the GPU span less its busy time.
StepActivity measured_activity(const TraceMatch& match);

struct TraceFit {
  std::string json;     // the calibration file
  std::string summary;  // what was fitted, for the terminal
  int64_t num_points = 0;
};

// Throws InputError naming the first trace when nothing could be fitted (no op measured).
TraceFit fit_calibration_from_traces(const std::vector<TraceFitSource>& sources, const std::string& command);

}  // namespace moesim
