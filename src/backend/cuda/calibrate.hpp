// SPDX-License-Identifier: MIT
// Calibration micro-benchmarks on the local GPUs (or one GPU per process of an MPI job): GEMMs over shape grids (each also against the
// best of cuBLASLt's ranked algorithms), expert grouped GEMMs at realistic tokens per expert,
// memory-bound kernels, pinned host copies, NCCL collectives over sizes and group sizes
// (algbw and busbw as nccl-tests defines them), and the attention op kinds of a K3 step graph
// (sparse attention, lightning indexer, KDA; forward and backward) launched through the executor's
// launch_op at 2048-32768 tokens, as FLOP/s of each graph op's own flops, and the CCE loss the same
// way at a grid of hidden sizes (calibrate_cce.hpp). The result is a calibration file in the format of
// docs/calibration/format.md, which src/cost/calibration.hpp reads.
//
// Timing: CUDA events after warm-up, the median of many repeats, inputs drawn from a pool much
// larger than the L2 cache and rotated between repeats, values uniform in [-1, 1) and never zero.
#pragma once

#include <functional>
#include <set>
#include <string>

#include "core/distributed.hpp"

namespace moesim::cuda {

struct CalibrateOptions {
  bool quick = false;   // a coarse grid and fewer repeats (a smoke test of the whole path)
  int num_devices = 0;  // the first N visible GPUs (0: all); collectives over 2, 4, ... and N of them
  // Parts to measure (empty: all): gemm, memory, attention, loss, collectives, copies
  // (app/calibrate_command.hpp says which tables each writes).
  std::set<std::string> only;
  std::string attention_scenario;  // scenario whose attention ops are timed (empty: the K3 slice)
  // GEMMs and grouped GEMMs busy the GPU this fraction of the sweep, idle between calls for the
  // rest (1: back to back). Back to back they draw the power cap and run at lower clocks than in a
  // training step that draws less; at 0.5 they run at nearly the top clock, faster than in a step
  // that draws more. Which one a step sees depends on its power (docs/calibration/validation.md).
  double gemm_duty = 1;
  std::string command;  // recorded as provenance
  std::function<void(const std::string&)> log;  // a line per measurement; may be empty
  // After each measurement: how many are done of all this run plans (counted before the first one
  // runs: GEMM shapes, memory kernels, attention and loss ops of their step graphs, collective
  // series of one kind and group). May be empty.
  std::function<void(int64_t done, int64_t total)> progress;
};

struct CalibrationRun {
  std::string json;     // the calibration file
  std::string summary;  // a short table for the terminal
};

// Without a launcher one process measures on every local GPU (collectives over the first 2, 4, ...
// of them). Under mpirun each process drives one GPU: process 0 runs the one-GPU benchmarks, every
// process joins the collectives (within a node and, on several nodes, across them:
// collective_layouts in backend/rank_bootstrap.hpp), and process 0 returns the file; the others
// return an empty run.
CalibrationRun run_calibration(const CalibrateOptions& options, Distributed& job);

}  // namespace moesim::cuda
