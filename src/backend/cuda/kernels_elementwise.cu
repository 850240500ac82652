// SPDX-License-Identifier: MIT
// Elementwise kernels: SwiGLU forward/backward, add, copy, and the benchmark fill.
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::to_bf;
using detail::to_f;

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  // Grid-stride loops: enough blocks to fill the GPU, capped so the grid stays in range.
  const int64_t blocks = detail::ceil_div(n, kThreads);
  return static_cast<unsigned>(blocks < 65536 ? (blocks > 0 ? blocks : 1) : 65536);
}

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + __expf(-x)); }

// One block per row (rows in a grid-stride loop); 8 values per access when f allows.
template <int V>
__global__ void swiglu_forward_kernel(const bf16_bits* __restrict__ h, bf16_bits* __restrict__ y, int64_t rows, int64_t f) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const bf16_bits* gate = h + r * 2 * f;
    const bf16_bits* up = gate + f;
    for (int64_t c = threadIdx.x * V; c < f; c += blockDim.x * V) {
      float g[V], u[V];
      detail::load<V>(gate + c, g);
      detail::load<V>(up + c, u);
#pragma unroll
      for (int j = 0; j < V; ++j) g[j] = g[j] * sigmoid(g[j]) * u[j];
      detail::store<V>(y + r * f + c, g);
    }
  }
}

template <int V>
__global__ void swiglu_backward_kernel(const bf16_bits* __restrict__ h, const bf16_bits* __restrict__ dy, bf16_bits* __restrict__ dh,
                                       int64_t rows, int64_t f) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const bf16_bits* gate = h + r * 2 * f;
    const bf16_bits* up = gate + f;
    for (int64_t c = threadIdx.x * V; c < f; c += blockDim.x * V) {
      float g[V], u[V], d[V], dg[V], du[V];
      detail::load<V>(gate + c, g);
      detail::load<V>(up + c, u);
      detail::load<V>(dy + r * f + c, d);
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float s = sigmoid(g[j]);
        dg[j] = d[j] * u[j] * s * (1.0f + g[j] * (1.0f - s));  // silu'(g) = s (1 + g (1 - s))
        du[j] = d[j] * g[j] * s;
      }
      detail::store<V>(dh + r * 2 * f + c, dg);
      detail::store<V>(dh + r * 2 * f + f + c, du);
    }
  }
}

// Vectorised: 8 BF16 per 16-byte load when the count and pointers allow, else one at a time.
__global__ void add_kernel(const bf16_bits* __restrict__ a, const bf16_bits* __restrict__ b, bf16_bits* __restrict__ c, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    c[i] = to_bf(to_f(a[i]) + to_f(b[i]));
  }
}

__global__ void add_kernel_vec(const uint4* __restrict__ a, const uint4* __restrict__ b, uint4* __restrict__ c,
                               int64_t n_vec) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_vec;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint4 va = a[i];
    const uint4 vb = b[i];
    const auto* pa = reinterpret_cast<const bf16_bits*>(&va);
    const auto* pb = reinterpret_cast<const bf16_bits*>(&vb);
    uint4 vc;
    auto* pc = reinterpret_cast<bf16_bits*>(&vc);
#pragma unroll
    for (int j = 0; j < 8; ++j) pc[j] = to_bf(to_f(pa[j]) + to_f(pb[j]));
    c[i] = vc;
  }
}

__global__ void copy_kernel_vec(const uint4* __restrict__ src, uint4* __restrict__ dst, int64_t n_vec) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n_vec;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

__global__ void copy_kernel(const bf16_bits* __restrict__ src, bf16_bits* __restrict__ dst, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    dst[i] = src[i];
  }
}

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finaliser
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void fill_uniform_kernel(bf16_bits* x, int64_t n, uint64_t seed, float lo, float hi) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const uint64_t r = mix64(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(i));
    const float u = static_cast<float>(r >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    float v = lo + (hi - lo) * u;
    if (v == 0.0f) v = hi;  // never zeros: zero operands make GEMMs and copies unrealistically cheap
    x[i] = to_bf(v);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

void swiglu_forward(const bf16_bits* h, bf16_bits* y, int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows * f == 0) return;
  const auto grid = static_cast<unsigned>(rows < 65536 ? rows : 65536);
  if (detail::vectorizable(f, {h, y})) {
    swiglu_forward_kernel<8><<<grid, kThreads, 0, stream>>>(h, y, rows, f);
  } else {
    swiglu_forward_kernel<1><<<grid, kThreads, 0, stream>>>(h, y, rows, f);
  }
  MOESIM_LAUNCH_CHECK();
}

void swiglu_backward(const bf16_bits* h, const bf16_bits* dy, bf16_bits* dh, int64_t rows, int64_t f, cudaStream_t stream) {
  if (rows * f == 0) return;
  const auto grid = static_cast<unsigned>(rows < 65536 ? rows : 65536);
  if (detail::vectorizable(f, {h, dy, dh})) {
    swiglu_backward_kernel<8><<<grid, kThreads, 0, stream>>>(h, dy, dh, rows, f);
  } else {
    swiglu_backward_kernel<1><<<grid, kThreads, 0, stream>>>(h, dy, dh, rows, f);
  }
  MOESIM_LAUNCH_CHECK();
}

void add(const bf16_bits* a, const bf16_bits* b, bf16_bits* c, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n % 8 == 0 && aligned16(a) && aligned16(b) && aligned16(c)) {
    add_kernel_vec<<<grid_for(n / 8), kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(a),
                                                              reinterpret_cast<const uint4*>(b),
                                                              reinterpret_cast<uint4*>(c), n / 8);
  } else {
    add_kernel<<<grid_for(n), kThreads, 0, stream>>>(a, b, c, n);
  }
  MOESIM_LAUNCH_CHECK();
}

void copy(const bf16_bits* src, bf16_bits* dst, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  if (n % 8 == 0 && aligned16(src) && aligned16(dst)) {
    copy_kernel_vec<<<grid_for(n / 8), kThreads, 0, stream>>>(reinterpret_cast<const uint4*>(src),
                                                               reinterpret_cast<uint4*>(dst), n / 8);
  } else {
    copy_kernel<<<grid_for(n), kThreads, 0, stream>>>(src, dst, n);
  }
  MOESIM_LAUNCH_CHECK();
}

void fill_uniform(bf16_bits* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream) {
  if (n == 0) return;
  fill_uniform_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n, seed, lo, hi);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
