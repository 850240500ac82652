// SPDX-License-Identifier: MIT
// Kernel timing with CUDA events: warm-up runs, then each repeat timed between its own pair of
// events; the median is what calibration reports (robust to the odd clock or scheduling hiccup).
#pragma once

#include <functional>
#include <vector>

#include <cuda_runtime.h>

namespace moesim::cuda {

struct Timing {
  double median_s = 0;
  double min_s = 0;
  double max_s = 0;
  int repeats = 0;
};

Timing summarize(std::vector<double> seconds);

// `enqueue(i)` issues repeat i's work on `stream` (i rotates inputs beyond the L2 cache).
Timing time_on_stream(cudaStream_t stream, int warmup, int repeats, const std::function<void(int)>& enqueue);

}  // namespace moesim::cuda
