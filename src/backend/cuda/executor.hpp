// SPDX-License-Identifier: MIT
// The executor: runs the per-rank programs of a StepGraph on the local GPUs, one host thread per
// GPU, and reports when each op ran (a Timeline in the simulator's format, so report/trace.hpp
// writes the same trace) and how much memory each rank held.
//
// Execution contract (program.hpp, with the engine's queues made concrete):
//   - queues are CUDA streams: one compute stream, one copy stream, and one stream per
//     process-group kind for communication (graph/queues.hpp, the engine's rule), so an
//     FSDP all-gather, an EP all-to-all and a swap copy overlap one another as in the engine;
//   - ops are issued in program order; an op waits for its queue predecessor (stream order) and
//     for each explicit dependency on another queue (cudaStreamWaitEvent on that op's end event);
//   - each op is timed by CUDA events recorded on its stream before and after it, relative to a
//     step-start event that every stream of the rank waits for;
//   - a collective runs over an NCCL communicator per group kind (ncclCommInitAll over each
//     group's devices, then each rank's thread calls its own communicator); groups of one member
//     take no time, as in the engine; all-to-all(v) is grouped ncclSend/ncclRecv;
//   - memory: persistent state (params, master params, grads, optimizer states; the engine's
//     `runtime` excluded) is allocated for real at start; the transient tensors are placed in one
//     slab by memory/buffer_plan.hpp's plan_slab on the op times of the last warm-up step (the
//     allocator the engine's ledger models), the slab is allocated for real, and each measured
//     step adds the event waits that placement needs (an op reusing memory another queue released
//     waits for that release), so the reuse is race-free; on the timeline it was planned from a
//     wait is already satisfied.
//
// Caveats: this backend measures time and memory, not numerics (op_kernels.hpp): values do not
// flow between ops. Operand arenas, index tables and the pinned swap scratch are the executor's
// own and are reported apart from the measured peak. If one rank fails mid-step the others may
// wait in NCCL; run under a timeout.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/op_kernels.hpp"
#include "graph/timeline.hpp"
#include "graph/queues.hpp"
#include "graph/step_graph.hpp"
#include "memory/buffer_plan.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim::cuda {


// How a program maps onto streams: each op's queue, and the cross-queue waits it needs.
struct QueuePlan {
  std::vector<int8_t> queue;                  // per op
  std::vector<std::vector<uint32_t>> waits;   // per op: explicit dependencies on other queues (deduplicated)
  std::vector<int32_t> queue_pred;            // per op: the op before it on its queue, -1 if first
  std::array<int64_t, kNumQueues> num_ops{};
};
QueuePlan plan_queues(const Program& p);


// HBM and DDR in use on one rank over time when `p`'s memory effects apply at the given op start
// and end times (allocations and swap-in at starts, frees and swap-out at ends; at equal times
// frees first), starting from `persistent_bytes`: the executor's memory samples from measured
// times, and with the engine's times the engine's own memory curve.
std::vector<MemorySample> replay_memory(const Program& p, int32_t rank, double persistent_bytes,
                                        std::span<const Picoseconds> starts, std::span<const Picoseconds> ends);

// The step the execution contract gives for given op durations: every rank's ops in program
// order, each starting when its queue predecessor and its explicit dependencies have ended, a
// collective when every member of its group has reached it (the engine's rules without its cost
// model). `durations[rank][op]` in picoseconds, a collective's counted from the last member's
// arrival. Returns each rank's end. Fed the engine's own op times it gives the engine's step back
// (a test); fed measured times it says how much of the measured step the measured op times and
// the queue rules explain. Needs every rank to run one program (no pipeline stages): BackendError
// otherwise.
std::vector<Picoseconds> replay_schedule(const StepGraph& g, const std::vector<std::vector<Picoseconds>>& durations);

// Per rank and op, the durations of a timeline as replay_schedule takes them: end - start, a
// collective's from the latest start among its group's members.
std::vector<std::vector<Picoseconds>> op_durations(const StepGraph& g, const Timeline& t);

// Bytes of the operand arenas the ops of `rank` need (a dry run of every launch). Throws
// BackendError naming the first op without a kernel.
struct ArenaSizes {
  size_t in = 0;
  std::array<size_t, kNumQueues> out{};
};
// `cudnn_attention` as OpEnv's (the live launches must use the same kernels).
ArenaSizes size_arenas(const StepGraph& g, const ModelSpec& model, int64_t rank, const RoutingPlan& routing,
                       bool cudnn_attention = false);

struct ExecOptions {
  int64_t routing_step = 0;  // routing sample (the engine's EngineOptions::step)
  int warmup_steps = 2;      // untimed steps first (>= 1): the first pays GEMM autotuning and NCCL setup, the last one's op times place the slab
  int measured_steps = 3;    // the reported step is the one with the median step time
};

struct RankRun {
  int32_t rank = 0;
  int device = 0;
  std::string device_name;
  double persistent_bytes = 0;         // allocated for real: params, master params, grads, optimizer states
  double context_bytes = 0;            // device memory in use before the rank allocated anything (CUDA context, NCCL)
  double executor_bytes = 0;           // operand arenas, index tables, GEMM workspace: the executor's own, not the step's
  double slab_bytes = 0;               // the transient tensors' slab (plan_slab), allocated for real
  int64_t slab_waits = 0;              // event waits the slab's placement added to the step
  // Device memory in use at the end of the reported step (cudaMemGetInfo) less executor_bytes:
  // CUDA context, NCCL (its buffers included), libraries, persistent state and the slab.
  double device_bytes = 0;
  // Persistent + the transient tensors at their peak when allocations and frees count in program
  // order (plan_buffers), and when they count at the measured op starts and ends (replay_memory:
  // the engine's accounting on measured times).
  double program_order_peak_bytes = 0;
  double timeline_peak_bytes = 0;
  Picoseconds end = 0;                 // last op end in the reported step
};

struct ExecResult {
  std::vector<Picoseconds> step_times;  // every measured step (max over ranks)
  Picoseconds step_time = 0;            // the reported (median) step
  int32_t slowest_rank = 0;
  Timeline timeline;                    // the reported step: every op of every rank, memory of every rank
  std::vector<RankRun> ranks;
  // What ran flash_attention: "cudnn 91400" (cuDNN's fused SDPA, its version), "backend kernels"
  // with the reason cuDNN was not used, or "no flash_attention op".
  std::string attention_kernels;
};

// Runs the graph. The plan's rank count must equal the number of visible GPUs (InputError naming
// `scenario_file` and /num_devices otherwise).
ExecResult execute(const Scenario& scenario, const StepGraph& g, const ExecOptions& options);

// Number of visible CUDA devices (0 without a driver or GPU; never throws).
int visible_gpus();

}  // namespace moesim::cuda
