// SPDX-License-Identifier: MIT
#include "backend/cuda/host_copy.hpp"

#include "backend/cuda/check.hpp"

namespace moesim::cuda {

void swap_out(const void* device_src, void* pinned_dst, size_t bytes, cudaStream_t stream) {
  MOESIM_CUDA_CHECK(cudaMemcpyAsync(pinned_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
}

void swap_in(const void* pinned_src, void* device_dst, size_t bytes, cudaStream_t stream) {
  MOESIM_CUDA_CHECK(cudaMemcpyAsync(device_dst, pinned_src, bytes, cudaMemcpyHostToDevice, stream));
}

}  // namespace moesim::cuda
