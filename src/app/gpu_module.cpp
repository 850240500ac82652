// SPDX-License-Identifier: MIT
// The entry point of libmoesim_gpu.so (see gpu_commands.hpp).
#include "app/gpu_commands.hpp"

extern "C" __attribute__((visibility("default"))) const moesim::GpuCommands* moesim_gpu_commands() {
  static const moesim::GpuCommands commands{moesim::kGpuCommandsAbi, &moesim::run_calibrate_command,
                                            &moesim::run_run_command, &moesim::run_validate_command};
  return &commands;
}
