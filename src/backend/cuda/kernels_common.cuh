// SPDX-License-Identifier: MIT
// Shared device helpers for the backend's .cu files: BF16 casts, ceil-div, block reductions.
#pragma once

#include <cstdint>
#include <initializer_list>

#include <cuda_bf16.h>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda::detail {

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

__device__ __forceinline__ float to_f(bf16_bits b) {
  return __bfloat162float(__ushort_as_bfloat16(b));
}
__device__ __forceinline__ bf16_bits to_bf(float f) {
  return __bfloat16_as_ushort(__float2bfloat16_rn(f));
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `shared` holds 32 floats; the call synchronises the block.
__device__ __forceinline__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_sum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  v = lane < num_warps ? shared[lane] : 0.0f;
  return warp_sum(v);
}
__device__ __forceinline__ float block_max(float v, float* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int num_warps = static_cast<int>(blockDim.x) / 32;
  v = lane < num_warps ? shared[lane] : -INFINITY;
  return warp_max(v);
}

// V consecutive BF16 values loaded or stored as one access (V = 8: a uint4), converted to FP32.
template <int V>
__device__ __forceinline__ void load(const bf16_bits* p, float* out) {
  if constexpr (V == 8) {
    const uint4 raw = *reinterpret_cast<const uint4*>(p);
    const auto* b = reinterpret_cast<const bf16_bits*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) out[j] = to_f(b[j]);
  } else {
    out[0] = to_f(*p);
  }
}
template <int V>
__device__ __forceinline__ void store(bf16_bits* p, const float* in) {
  if constexpr (V == 8) {
    uint4 raw;
    auto* b = reinterpret_cast<bf16_bits*>(&raw);
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = to_bf(in[j]);
    *reinterpret_cast<uint4*>(p) = raw;
  } else {
    *p = to_bf(in[0]);
  }
}

// Rows of `cols` BF16 values can use 16-byte accesses when every row starts 16-byte aligned.
inline bool vectorizable(int64_t cols, std::initializer_list<const void*> ptrs) {
  if (cols % 8 != 0) return false;
  for (const void* p : ptrs) {
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return false;
  }
  return true;
}

}  // namespace moesim::cuda::detail
