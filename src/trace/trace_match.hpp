// SPDX-License-Identifier: MIT
// Matching a profiler trace of one rank against the op graph of a scenario: which kernels of each
// profiler step belong to which op (trace_rules.hpp says how), what each op took on the GPU, the
// steps' GPU time, the allocator's peak, and everything that could not be matched.
//
// Times are per step: the sum over the trace's steps divided by their number. An op's time is the
// sum of its kernels' durations (GPU time, not the range's host time); every op of one name (one
// per micro-batch) gets the same share, which is exact when the graph gives them one shape.
// Matching is deterministic: the same trace and scenario give the same result.
//
// The host's time is read from the launch calls of the GPU work in each step, in host order: the
// time from each launch to the next one is the host's time on the op that launch belongs to
// (kernels of no op, such as the autograd engine's, count with the op before them; a hook's
// launches - optimizer, FSDP2 - are shared equally over the ops of its kind), less what the host
// waited inside a synchronous copy to the host (a DtoH copy whose call returned after the copy
// ended: the time from the call to the copy's start). host_fit.hpp fits the scenario's
// host.op_issue and host.kernel_issue to it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "graph/step_graph.hpp"
#include "trace/kineto_trace.hpp"
#include "trace/trace_rules.hpp"

namespace moesim {

// One op name of the rank's program with what the trace measured for it.
struct OpMeasure {
  std::string name;
  OpKind kind = OpKind::elementwise;
  Phase phase = Phase::fwd;
  int64_t num_ops = 0;           // ops of this name in the program (one per micro-batch, usually)
  double seconds = 0;            // per step, all ops of the name together
  double ranges_per_step = 0;    // ranges of this name per step (differs from num_ops: a warning)
  int64_t num_kernels = 0;       // over all steps
  double host_s = 0;             // per step: the host's time on the ops of this name (see above)
  double per_op_seconds() const { return num_ops > 0 ? seconds / static_cast<double>(num_ops) : 0; }
};

// Kernels that went to no op, grouped by why and where.
struct Unmatched {
  std::string what;  // "range layer*.attn.rope", "framework FSDP::pre_forward (layers.0)", "no launch record", ...
  std::string kernel_class;  // the most common class among them
  int64_t num_kernels = 0;   // over all steps
  double seconds = 0;        // per step
};

struct StepMeasure {
  std::string name;           // "ProfilerStep#3", or "whole trace" without step ranges
  double host_s = 0;          // the step range's duration on the host
  double gpu_span_s = 0;      // first kernel start to last kernel end among the step's kernels
  double gpu_busy_s = 0;      // union of the step's kernel intervals (all streams)
  double launch_span_s = 0;   // the host's first to last launch of the step's GPU work
  int64_t num_kernels = 0;
};

struct TraceMatch {
  std::string trace_file;
  int64_t rank = 0;                 // the rank whose program the trace is matched against
  std::vector<StepMeasure> steps;
  std::map<std::string, OpMeasure> ops;  // by op name, every op name of the program (measured or not)
  std::vector<Unmatched> unmatched;      // by seconds, largest first
  std::vector<std::string> warnings;
  int64_t num_kernels = 0;               // in the steps, all of them
  int64_t num_matched_kernels = 0;
  double kernel_seconds = 0;             // per step, all kernels
  double matched_seconds = 0;            // per step, kernels that went to an op
  double host_s = 0;                     // per step: the host's time on the ops, their host_s summed
  double host_blocked_s = 0;             // per step: waits in synchronous copies, left out of host_s
  double launches_per_step = 0;          // launch calls of GPU work in the steps, per step
  double peak_allocated_bytes = -1;      // max "Total Allocated" during the steps; -1 without memory events
  double peak_reserved_bytes = -1;
  // What was allocated when the first step began (the state before its first allocator event):
  // the training state, and whatever else the process held; -1 where the events do not say.
  double start_allocated_bytes = -1;

  double step_seconds() const;  // median GPU span over the steps
  double num_steps() const { return static_cast<double>(steps.size()); }
};

// Matches `trace` against the program of trace.rank in `graph`. Throws InputError naming the
// trace when its rank is not a rank of the scenario's plan.
TraceMatch match_trace(const KinetoTrace& trace, const StepGraph& graph);

// "layer12.attn.q_proj.bwd" -> "layer*.attn.q_proj.bwd" (as validate's per-op tables fold names).
std::string fold_layer(const std::string& name);

// The op family validate --from-trace compares per (gemm, grouped_gemm, attention, norm,
// elementwise, moe_routing, embedding, loss, optimizer, a collective's kind, send_recv, host_copy).
std::string_view op_family(OpKind kind);

}  // namespace moesim
