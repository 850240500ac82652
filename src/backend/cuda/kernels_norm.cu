// SPDX-License-Identifier: MIT
// RMSNorm forward and backward. Forward and dx: one block per row, FP32 statistics, 16-byte
// vector accesses (8 BF16) when the row length and pointers allow. dw: a column reduction over all
// rows in a fixed order (deterministic), 2 columns per thread so that a warp reads 128 bytes a row.
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::load;
using detail::store;
using detail::to_bf;
using detail::to_f;

constexpr int kThreads = 256;

template <int V>
__global__ void rmsnorm_forward_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w, bf16* __restrict__ y,
                                       float* __restrict__ rstd, int64_t cols, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * cols;
  float ss = 0;
  for (int64_t i = threadIdx.x * V; i < cols; i += blockDim.x * V) {
    float v[V];
    load<V>(xr + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) ss += v[j] * v[j];
  }
  ss = detail::block_sum(ss, shared);
  const float r = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  bf16* yr = y + row * cols;
  for (int64_t i = threadIdx.x * V; i < cols; i += blockDim.x * V) {
    float v[V], g[V];
    load<V>(xr + i, v);
    load<V>(w + i, g);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = v[j] * r * g[j];
    store<V>(yr + i, v);
  }
}

template <int V>
__global__ void rmsnorm_backward_dx_kernel(const bf16* __restrict__ x, const bf16* __restrict__ w,
                                           const float* __restrict__ rstd, const bf16* __restrict__ dy,
                                           bf16* __restrict__ dx, int64_t cols) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const bf16* xr = x + row * cols;
  const bf16* dyr = dy + row * cols;
  const float r = rstd[row];
  float dot = 0;  // sum over the row of g * xhat
  for (int64_t i = threadIdx.x * V; i < cols; i += blockDim.x * V) {
    float xv[V], gv[V], dv[V];
    load<V>(xr + i, xv);
    load<V>(w + i, gv);
    load<V>(dyr + i, dv);
#pragma unroll
    for (int j = 0; j < V; ++j) dot += dv[j] * gv[j] * xv[j] * r;
  }
  dot = detail::block_sum(dot, shared);
  const float mean = dot / static_cast<float>(cols);
  bf16* dxr = dx + row * cols;
  for (int64_t i = threadIdx.x * V; i < cols; i += blockDim.x * V) {
    float xv[V], gv[V], dv[V];
    load<V>(xr + i, xv);
    load<V>(w + i, gv);
    load<V>(dyr + i, dv);
#pragma unroll
    for (int j = 0; j < V; ++j) dv[j] = r * (dv[j] * gv[j] - xv[j] * r * mean);
    store<V>(dxr + i, dv);
  }
}

// dw[c] = sum over rows of dy * x * rstd. Block (32, 32): each thread sums columns (c, c + 1) over
// the rows y, y + 32, ...; the 32 partial sums of a column are added in a fixed order.
constexpr int kDwRows = 32;
__global__ void rmsnorm_backward_dw_kernel(const bf16* __restrict__ x, const float* __restrict__ rstd,
                                           const bf16* __restrict__ dy, float* __restrict__ dw, int64_t rows,
                                           int64_t cols) {
  __shared__ float partial[kDwRows][65];
  const int64_t c = (blockIdx.x * 32 + threadIdx.x) * 2;
  float a0 = 0, a1 = 0;
  if (c < cols) {
    const bool pair = c + 1 < cols;
    for (int64_t r = threadIdx.y; r < rows; r += kDwRows) {
      const float s = rstd[r];
      a0 += to_f(dy[r * cols + c]) * to_f(x[r * cols + c]) * s;
      if (pair) a1 += to_f(dy[r * cols + c + 1]) * to_f(x[r * cols + c + 1]) * s;
    }
  }
  partial[threadIdx.y][2 * threadIdx.x] = a0;
  partial[threadIdx.y][2 * threadIdx.x + 1] = a1;
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int k = 0; k < 2; ++k) {
      float sum = 0;
      for (int j = 0; j < kDwRows; ++j) sum += partial[j][2 * threadIdx.x + k];
      if (c + k < cols) dw[c + k] = sum;
    }
  }
}

}  // namespace

void rmsnorm_forward(const bf16* x, const bf16* w, bf16* y, float* rstd, int64_t rows, int64_t cols, float eps,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>(rows);
  if (detail::vectorizable(cols, {x, w, y})) {
    rmsnorm_forward_kernel<8><<<grid, kThreads, 0, stream>>>(x, w, y, rstd, cols, eps);
  } else {
    rmsnorm_forward_kernel<1><<<grid, kThreads, 0, stream>>>(x, w, y, rstd, cols, eps);
  }
  MOESIM_LAUNCH_CHECK();
}

void rmsnorm_backward(const bf16* x, const bf16* w, const float* rstd, const bf16* dy, bf16* dx, float* dw,
                      int64_t rows, int64_t cols, cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>(rows);
  if (detail::vectorizable(cols, {x, w, dy, dx})) {
    rmsnorm_backward_dx_kernel<8><<<grid, kThreads, 0, stream>>>(x, w, rstd, dy, dx, cols);
  } else {
    rmsnorm_backward_dx_kernel<1><<<grid, kThreads, 0, stream>>>(x, w, rstd, dy, dx, cols);
  }
  MOESIM_LAUNCH_CHECK();
  rmsnorm_backward_dw_kernel<<<static_cast<unsigned>(detail::ceil_div(cols, 64)), dim3(32, kDwRows), 0, stream>>>(
      x, rstd, dy, dw, rows, cols);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
