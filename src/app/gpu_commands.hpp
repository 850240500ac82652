// SPDX-License-Identifier: MIT
// The GPU commands (calibrate, run, validate) live in a module of their own, libmoesim_gpu.so
// beside the binary, loaded only when one of them runs: the CUDA libraries it needs (cuBLAS,
// NCCL: some 200 MB mapped at start-up) then stay out of every other command.
#pragma once

#include <string>

#include "app/calibrate_command.hpp"
#include "app/run_command.hpp"

namespace moesim {

struct GpuCommands {
  int abi = 0;  // kGpuCommandsAbi of the module; a module from another build is refused
  // Each runs over the job's processes (core/distributed.hpp: one, or one rank per process under
  // mpirun; the binary starts MPI, the module never calls it) and returns process 0's output.
  std::string (*calibrate)(const CalibrateCommand&, Distributed&) = nullptr;
  std::string (*run)(const RunCommand&, Distributed&) = nullptr;
  std::string (*validate)(const RunCommand&, Distributed&) = nullptr;
};

// Bumped whenever GpuCommands or the option structs change.
inline constexpr int kGpuCommandsAbi = 4;

// The module's entry point (extern "C", so that the loader finds it by name).
inline constexpr const char* kGpuCommandsSymbol = "moesim_gpu_commands";

// Loads the module once (from the binary's folder); throws std::runtime_error naming the file and
// dlopen's reason when it cannot.
const GpuCommands& gpu_commands();

}  // namespace moesim
