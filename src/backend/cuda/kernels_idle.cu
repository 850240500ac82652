// SPDX-License-Identifier: MIT
#include <cstdint>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"

namespace moesim::cuda {

namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void idle_kernel(uint64_t ns) {
  const uint64_t start = global_ns();
  while (global_ns() - start < ns) __nanosleep(1000);
}

}  // namespace

void idle_gpu(double seconds, cudaStream_t stream) {
  if (!(seconds > 0)) return;
  idle_kernel<<<1, 1, 0, stream>>>(static_cast<uint64_t>(seconds * 1e9));
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
