// SPDX-License-Identifier: MIT
// CUDA-event timing of a launcher: median of individually timed repeats.
#include <algorithm>
#include <stdexcept>
#include <vector>

#include "backend/cuda/attention/attention_common.hpp"
#include "backend/cuda/check.hpp"

namespace moesim::cuda {

double time_launch_ms(cudaStream_t stream, const std::function<void(int rep)>& launch, int warmup, int repeats) {
  if (repeats < 1) throw std::invalid_argument("time_launch_ms: repeats must be >= 1");
  int rep = 0;
  for (int i = 0; i < warmup; ++i) launch(rep++);
  cudaEvent_t start = nullptr, stop = nullptr;
  MOESIM_CUDA_CHECK(cudaEventCreate(&start));
  MOESIM_CUDA_CHECK(cudaEventCreate(&stop));
  std::vector<float> ms(static_cast<size_t>(repeats));
  try {
    for (auto& m : ms) {
      MOESIM_CUDA_CHECK(cudaEventRecord(start, stream));
      launch(rep++);
      MOESIM_CUDA_CHECK(cudaEventRecord(stop, stream));
      MOESIM_CUDA_CHECK(cudaEventSynchronize(stop));
      MOESIM_CUDA_CHECK(cudaEventElapsedTime(&m, start, stop));
    }
  } catch (...) {
    (void)cudaEventDestroy(start);
    (void)cudaEventDestroy(stop);
    throw;
  }
  MOESIM_CUDA_CHECK(cudaEventDestroy(start));
  MOESIM_CUDA_CHECK(cudaEventDestroy(stop));
  std::nth_element(ms.begin(), ms.begin() + repeats / 2, ms.end());
  return ms[static_cast<size_t>(repeats / 2)];
}

}  // namespace moesim::cuda
