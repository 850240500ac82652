// SPDX-License-Identifier: MIT
// `moesim run SCENARIO` and `moesim validate SCENARIO` (built with CUDA only).
//   run:      executes the scenario's step graph on the GPUs (backend/cuda/executor.hpp):
//             step time, peak memory per rank, the busiest ops; --trace writes the trace in the
//             simulator's format.
//   validate: runs it on the GPUs and in the simulator (the engine with the scenario's hardware
//             file and its calibration file) and prints per-op error (op names folded over
//             layers, as the engine's top_ops), step-time error and peak-memory error, with the
//             5% targets (step time, peak memory) marked pass/fail.
#pragma once

#include <cstdint>
#include <string>

#include "core/distributed.hpp"

namespace moesim {

struct RunCommand {
  std::string scenario;  // file or shipped name
  std::string hardware;  // --hardware: in place of the scenario's hardware file (empty: its own)
  std::string trace;     // Chrome trace of the reported step (empty: none)
  bool json = false;
  int64_t steps = 3;     // measured steps after the warm-up steps; the median step is reported
};

// Both return the text to print on stdout; bad input throws InputError. Under mpirun each process
// of `job` runs one rank of the plan (backend/cuda/executor.hpp) and process 0 returns the report
// (the others return nothing); without a launcher one process drives every local GPU.
std::string run_run_command(const RunCommand& c, Distributed& job);
std::string run_validate_command(const RunCommand& c, Distributed& job);

}  // namespace moesim
