// SPDX-License-Identifier: MIT
// What an execution on GPUs measured, and how the measurements of every rank become one result.
// Plain C++ (no CUDA), so that the multi-process path is testable on any machine: each rank's
// measurements travel as bytes (encode_measurement / decode_measurement) and rank 0 assembles them
// (assemble_result) exactly as the single-process executor assembles its threads' measurements.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "graph/step_graph.hpp"
#include "graph/timeline.hpp"

namespace moesim::cuda {

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

// One measured step of one rank: its op times (from the rank's step-start event) and its run.
struct MeasuredStep {
  std::vector<Picoseconds> op_start, op_end;  // per op of the rank's program
  RankRun run;                                // run.end: the rank's last op end in this step
};

// Every measured step of one rank, in order.
struct RankMeasurement {
  int32_t rank = 0;
  std::vector<MeasuredStep> steps;
};

// A rank's measurements as bytes (what a process sends rank 0), and back. decode_measurement
// throws std::runtime_error on bytes that are not an encoding (truncated, trailing bytes).
std::string encode_measurement(const RankMeasurement& m);
RankMeasurement decode_measurement(const std::string& bytes);

// HBM and DDR in use on one rank over time when `p`'s memory effects apply at the given op start
// and end times (allocations and swap-in at starts, frees and swap-out at ends; at equal times
// frees first), starting from `persistent_bytes`: the executor's memory samples from measured
// times, and with the engine's times the engine's own memory curve.
std::vector<MemorySample> replay_memory(const Program& p, int32_t rank, double persistent_bytes,
                                        std::span<const Picoseconds> starts, std::span<const Picoseconds> ends);

// The result of a run from every rank's measurements (`ranks[r]` is rank r's, each with the same
// number of measured steps): step times are the max over ranks per step; the reported step is the
// median one (the upper median for an even count); its op times make the timeline, its memory
// samples and each rank's timeline peak; the slowest rank is the one whose reported step ends
// last (the lowest such rank). `attention_kernels` is left empty. Throws std::runtime_error when
// the measurements do not fit the graph (a rank missing, a wrong op count).
ExecResult assemble_result(const StepGraph& g, const std::vector<RankMeasurement>& ranks);

}  // namespace moesim::cuda
