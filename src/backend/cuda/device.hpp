// SPDX-License-Identifier: MIT
// The GPUs present and the software versions: what tests check before running (no device: skip)
// and what a calibration file records as provenance.
#pragma once

#include <string>

namespace moesim::cuda {

// Usable CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();

struct DeviceInfo {
  std::string name;
  int num_sms = 0;
  double memory_bytes = 0;
  double l2_bytes = 0;
  std::string driver;   // CUDA driver API version, "13.0"
  std::string runtime;  // CUDA runtime linked in
  std::string cublas;   // cuBLASLt library version
  std::string nccl;     // NCCL library version
};

DeviceInfo device_info(int device);

}  // namespace moesim::cuda
