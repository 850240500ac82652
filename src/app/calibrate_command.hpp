// SPDX-License-Identifier: MIT
// `moesim calibrate [--devices N] [--only FAMILIES] [--scenario S] [--out FILE] [--quick]`: runs
// the backend's micro-benchmarks on the local GPUs, or with `mpirun -np N` on one GPU per process
// (collectives across the processes, and across nodes when the job spans several), and writes a
// calibration file (docs/calibration/format.md). The options are read and checked in every build
// (check_calibrate_command, no GPU needed); the benchmarks run only in CUDA builds, from the GPU
// module (gpu_commands.hpp).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/distributed.hpp"

namespace moesim {

// What `--only` may name: each is one part of the calibration file (docs/calibration/format.md).
//   gemm         kernels.gemm, kernels.gemm_shapes, kernels.grouped_gemm: dense GEMMs (by min(m, n, k),
//                and each linear layer of the calibration scenarios pass by pass), expert GEMMs
//   memory       kernels.memory, other_kernels: memory-bound kernels (norms, elementwise, AdamW)
//   attention    attention: the attention op kinds of a step graph through the executor's launches
//   loss         kernels.cce: the CCE loss's ops through the executor's launches, by hidden size (a
//                part of its own, not inside gemm: it times the executor's chunked loss, GEMMs and
//                softmax kernels together, and can be re-measured and spliced without the GEMM tables)
//   collectives  collectives: NCCL all-reduce, all-gather, reduce-scatter, all-to-all over sizes
//   copies       host_copy: pinned host <-> device copies
inline const std::vector<std::string> kCalibrationFamilies{"gemm", "memory", "attention", "loss", "collectives", "copies"};

struct CalibrateCommand {
  std::string out;      // empty: the JSON goes to stdout and the summary to stderr
  bool quick = false;
  int64_t num_devices = 0;            // GPUs to use, the first N visible (0: all visible)
  std::vector<std::string> only;      // families to measure, each of kCalibrationFamilies (empty: all)
  std::string attention_scenario;     // scenario whose attention ops are timed (empty: the K3 slice)
  double gemm_duty = 1;               // the GEMM sweeps' busy fraction, in (0, 1] (cuda::CalibrateOptions)
  std::string command;  // the command line, recorded as provenance
  // Measurements done and planned, after each one (process 0 only): the binary's progress line on
  // a terminal (app/progress.hpp). Empty: no progress is shown, and log lines are plain.
  std::function<void(int64_t done, int64_t total)> progress;
};

// Reads `--only` ("gemm,collectives") into c.only and `--devices` (absent: all GPUs) into
// c.num_devices, and checks every option that needs no GPU: --devices from 1 to 4096, every
// family known, the scenario readable, --gemm-duty in (0, 1]. Throws InputError naming the flag.
void check_calibrate_command(CalibrateCommand& c, const std::string& only_text, std::optional<int64_t> devices);

// Returns the text to print on stdout (under mpirun: process 0; the others return nothing).
std::string run_calibrate_command(const CalibrateCommand& c, Distributed& job);

}  // namespace moesim
