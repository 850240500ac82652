// SPDX-License-Identifier: MIT
#include "app/calibrate_command.hpp"

#include <iostream>
#include <set>

#include "backend/cuda/calibrate.hpp"
#include "backend/cuda/device.hpp"
#include "core/error.hpp"
#include "core/output_file.hpp"

namespace moesim {

std::string run_calibrate_command(const CalibrateCommand& c) {
  // No GPU is the user's environment, not a defect: exit 2 with what to check.
  if (cuda::device_count() == 0) {
    throw InputError("moesim calibrate", "", "no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)");
  }
  const int visible = cuda::device_count();
  if (c.num_devices > visible) {
    throw InputError("--devices", "", "asks for " + std::to_string(c.num_devices) + " GPUs; " + std::to_string(visible) +
                                          " are visible (check CUDA_VISIBLE_DEVICES)");
  }
  cuda::CalibrateOptions opt;
  opt.quick = c.quick;
  opt.num_devices = static_cast<int>(c.num_devices);
  opt.only = std::set<std::string>(c.only.begin(), c.only.end());
  opt.attention_scenario = c.attention_scenario;
  opt.command = c.command;
  opt.log = [](const std::string& line) { std::cerr << "calibrate: " << line << "\n"; };
  const cuda::CalibrationRun run = cuda::run_calibration(opt);
  if (c.out.empty()) {
    std::cerr << run.summary;
    return run.json;
  }
  write_file_atomically(c.out, run.json, "--out");
  return run.summary + "wrote " + c.out + "\n";
}

}  // namespace moesim
