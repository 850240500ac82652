// SPDX-License-Identifier: MIT
// Swap copies between HBM and pinned host memory, asynchronous on the given (copy) stream.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

namespace moesim::cuda {

void swap_out(const void* device_src, void* pinned_dst, size_t bytes, cudaStream_t stream);
void swap_in(const void* pinned_src, void* device_dst, size_t bytes, cudaStream_t stream);

}  // namespace moesim::cuda
