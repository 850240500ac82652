// SPDX-License-Identifier: MIT
// The executor: runs the per-rank programs of a StepGraph on GPUs - the local ones from one host
// thread each, or one rank per process of an MPI job - and reports when each op ran (a Timeline in
// the simulator's format, so report/trace.hpp writes the same trace) and how much memory each rank
// held (backend/exec_result.hpp).
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
//     group's devices in one process, ncclCommInitRank in each process of a job; then each rank
//     calls its own communicator); groups of one member take no time, as in the engine;
//     all-to-all(v) is grouped ncclSend/ncclRecv;
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
// wait in NCCL; run under a timeout (an MPI job is ended by the command: MPI_Abort).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/op_kernels.hpp"
#include "backend/exec_result.hpp"
#include "core/distributed.hpp"
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

// Runs the graph in this process, one thread per rank. The plan's rank count must equal the
// number of visible GPUs (InputError naming `scenario_file` and /num_devices otherwise).
ExecResult execute(const Scenario& scenario, const StepGraph& g, const ExecOptions& options);

// Runs the graph over the processes of `job`: with a launcher (mpirun, even -np 1) one rank per
// process - rank r of the plan is process r, on the GPU of its local rank (rank_bootstrap.hpp);
// it builds only its own program's state, joins its groups' NCCL communicators (ncclCommInitRank,
// the unique ids made by process 0 and broadcast), and times its own ops with CUDA events; a host
// barrier over the job starts each step, as the threads' barrier does in one process. Process 0
// gathers every rank's measurements and returns the result assemble_result gives (the same as one
// process with the same op times); the other processes return an empty result. The job must have
// one process per rank of the plan (InputError naming /num_devices otherwise). Without a launcher
// it is execute(scenario, g, options) above.
ExecResult execute(const Scenario& scenario, const StepGraph& g, const ExecOptions& options, Distributed& job);

// Number of visible CUDA devices (0 without a driver or GPU; never throws).
int visible_gpus();

}  // namespace moesim::cuda
