// SPDX-License-Identifier: MIT
// The host's pace fitted to a matched profiler trace: the scenario's host.op_issue (h, per op of
// the graph) and host.kernel_issue (c, per kernel an op launches), so that the host spends
// h + k c on an op of k kernels, as the engine charges it (engine.hpp).
//
// Data, per op name of the rank's program: its n ops (one per micro-batch), their K kernels as
// the graph counts them (Op::num_kernels, what the engine charges), and Y, the host's time on
// them per step as the trace measured it (trace_match.hpp: launch to next launch, less waits in
// synchronous copies). An op that launched nothing has Y = 0: its host time is in the op's before.
//
// Estimator: weighted least squares of the time per op on (1, kernels per op), weighted by ops,
//
//     minimize  sum over names  n (Y / n - h - c K / n)^2,   h >= 0, c >= 0.
//
// With the intercept the weighted residuals sum to zero, so N h + K c = Y over the program: the
// fitted host spends the trace's total on the whole step, and the split between h and c comes
// from how the time per op grows with its kernels. On the constraint: c < 0 gives c = 0 and
// h = Y / N (the mean per op), h < 0 gives h = 0 and the slope through the origin. When every
// name has the same kernels per op, c is not identified: c = 0, h = Y / N.
//
// Caveat: the graph's kernel counts are what the simulator knows; where they differ from what
// the stack launches (FSDP2's copies and the optimizer are one kernel per op in the graph, tens
// in eager PyTorch) the difference lands in h (docs/calibration/from-trace.md).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "graph/program.hpp"
#include "trace/trace_match.hpp"

namespace moesim {

struct HostPaceRow {
  std::string name;
  double num_ops = 0;      // n
  double num_kernels = 0;  // K, of the n ops together
  double host_s = 0;       // Y, per step
};

struct HostPaceFit {
  double op_issue_s = 0;      // h
  double kernel_issue_s = 0;  // c
  bool kernel_identified = true;  // false: every name has the same kernels per op (c = 0)
  double num_ops = 0;         // N = sum n
  double num_kernels = 0;     // K = sum K
  double host_s = 0;          // Y = sum Y = N h + K c (unless a constraint binds)
  double rms_residual_s = 0;  // per op: sqrt(sum n (Y/n - h - c K/n)^2 / N)
};

// Throws std::invalid_argument when no row has an op (a bug: every program has ops).
HostPaceFit fit_host_pace(std::span<const HostPaceRow> rows);

// The rows of every op name of `p`, the program matched in `m` (names the trace did not see have
// Y = 0).
std::vector<HostPaceRow> host_pace_rows(const TraceMatch& m, const Program& p);

}  // namespace moesim
