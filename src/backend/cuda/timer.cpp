// SPDX-License-Identifier: MIT
#include "backend/cuda/timer.hpp"

#include <algorithm>

#include "backend/cuda/check.hpp"

namespace moesim::cuda {

Timing summarize(std::vector<double> seconds) {
  Timing t;
  if (seconds.empty()) return t;
  std::sort(seconds.begin(), seconds.end());
  const size_t n = seconds.size();
  t.median_s = n % 2 ? seconds[n / 2] : 0.5 * (seconds[n / 2 - 1] + seconds[n / 2]);
  t.min_s = seconds.front();
  t.max_s = seconds.back();
  t.repeats = static_cast<int>(n);
  return t;
}

Timing time_on_stream(cudaStream_t stream, int warmup, int repeats, const std::function<void(int)>& enqueue) {
  for (int i = 0; i < warmup; ++i) enqueue(i);
  std::vector<cudaEvent_t> events(2 * static_cast<size_t>(repeats));
  for (auto& e : events) MOESIM_CUDA_CHECK(cudaEventCreate(&e));
  for (int i = 0; i < repeats; ++i) {
    MOESIM_CUDA_CHECK(cudaEventRecord(events[2 * static_cast<size_t>(i)], stream));
    enqueue(warmup + i);
    MOESIM_CUDA_CHECK(cudaEventRecord(events[2 * static_cast<size_t>(i) + 1], stream));
  }
  MOESIM_CUDA_CHECK(cudaStreamSynchronize(stream));
  std::vector<double> seconds;
  for (int i = 0; i < repeats; ++i) {
    float ms = 0;
    MOESIM_CUDA_CHECK(cudaEventElapsedTime(&ms, events[2 * static_cast<size_t>(i)], events[2 * static_cast<size_t>(i) + 1]));
    seconds.push_back(ms * 1e-3);
  }
  for (auto& e : events) (void)cudaEventDestroy(e);
  return summarize(std::move(seconds));
}

}  // namespace moesim::cuda
