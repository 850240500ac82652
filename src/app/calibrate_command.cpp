// SPDX-License-Identifier: MIT
#include "app/calibrate_command.hpp"

#include <iostream>
#include <set>

#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/device.hpp"
#include "backend/rank_bootstrap.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"

namespace moesim {

std::string run_calibrate_command(const CalibrateCommand& c, Distributed& job) {
  // No GPU is the user's environment, not a defect: exit 2 with what to check (on every process
  // of a job when one of its nodes has none).
  cuda::agree_on_input(job, [&] {
    const int visible = cuda::device_count();
    if (visible == 0) {
      throw InputError("moesim calibrate", "", "no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)");
    }
    // One process drives the first N local GPUs; under mpirun each process drives one.
    if (job.size() == 1 && c.num_devices > visible) {
      throw InputError("--devices", "", "asks for " + std::to_string(c.num_devices) + " GPUs; " + std::to_string(visible) +
                                            " are visible (check CUDA_VISIBLE_DEVICES)");
    }
  });
  cuda::CalibrateOptions opt;
  opt.quick = c.quick;
  opt.num_devices = static_cast<int>(c.num_devices);
  opt.only = std::set<std::string>(c.only.begin(), c.only.end());
  opt.attention_scenario = c.attention_scenario;
  opt.gemm_duty = c.gemm_duty;
  opt.command = c.command;
  // Under a progress line (a terminal) each log line first clears it; the next update redraws it.
  const char* clear = c.progress ? "\r\033[K" : "";
  opt.log = [clear](const std::string& line) { std::cerr << clear << "calibrate: " << line << "\n"; };
  opt.progress = c.progress;
  const cuda::CalibrationRun run = cuda::run_calibration(opt, job);
  if (job.rank() != 0) return {};
  if (c.out.empty()) {
    std::cerr << run.summary;
    return run.json;
  }
  write_file_atomically(c.out, run.json, "--out");
  return run.summary + "wrote " + c.out + "\n";
}

}  // namespace moesim
