// SPDX-License-Identifier: MIT
// Helpers the GPU kernel tests share (test_util.hpp is CUDA-free: the CPU reference tests use it
// too): NaN-poisoned device buffers, a device-wide sync, the unit roundoffs of BF16 and FP32.
#pragma once

#include <cstddef>

#include "backend/cuda/bf16.hpp"
#include "backend/cuda/buffer.hpp"
#include "backend/cuda/check.hpp"

namespace moesim::cuda::test {

inline constexpr double u16 = kBf16Eps;
inline constexpr double u32 = kFp32Eps;

template <class T>
DeviceBuffer<T> poisoned(size_t n) {
  DeviceBuffer<T> b(n);
  b.fill_bytes(0xFF);  // NaN in BF16 and FP32
  return b;
}

inline void device_sync() { MOESIM_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace moesim::cuda::test
