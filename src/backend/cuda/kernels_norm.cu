// SPDX-License-Identifier: MIT
// RMSNorm forward and backward. Forward and dx: one block per row, FP32 statistics, 16-byte
// vector accesses (8 BF16) when the row length and pointers allow; rows of at most 256 vectorised
// elements (QK-norm's per-head rows of 128) take L = 8, 16 or 32 lanes of a warp each instead, as a
// block per row would leave most of its threads idle and pay a block's start-up per row (a 256-thread
// block per row of 128: 2.1 ms for 262,144 rows on an H200, 2026-12-01). dw: a column reduction, 2
// columns per thread so that a warp reads 128 bytes a row, over ranges of rows in parallel (one
// block per 64 columns alone left a 128-wide QK-norm's 524,288 rows to 2 blocks: 8.5 ms, 2026-12-03),
// the ranges' partial sums then added in a fixed order (deterministic).
#include <stdexcept>
#include <type_traits>

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

// The sum of squares of the row elements one thread reads: V at a time from `first`, every
// `stride` elements (the block-per-row and the lanes-per-row kernels differ only in these).
template <int V>
__device__ float row_sum_squares(const bf16_bits* __restrict__ xr, int64_t first, int64_t stride, int64_t cols) {
  float ss = 0;
  for (int64_t i = first; i < cols; i += stride) {
    float v[V];
    load<V>(xr + i, v);
#pragma unroll
    for (int j = 0; j < V; ++j) ss += v[j] * v[j];
  }
  return ss;
}

// y = x * rstd * w over the same elements.
template <int V>
__device__ void scale_row(const bf16_bits* __restrict__ xr, const bf16_bits* __restrict__ w, bf16_bits* __restrict__ yr, float r,
                          int64_t first, int64_t stride, int64_t cols) {
  for (int64_t i = first; i < cols; i += stride) {
    float v[V], g[V];
    load<V>(xr + i, v);
    load<V>(w + i, g);
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = v[j] * r * g[j];
    store<V>(yr + i, v);
  }
}

template <int V>
__global__ void rmsnorm_forward_kernel(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w, bf16_bits* __restrict__ y,
                                       float* __restrict__ rstd, int64_t cols, float eps) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const bf16_bits* xr = x + row * cols;
  const int64_t first = threadIdx.x * V, stride = static_cast<int64_t>(blockDim.x) * V;
  const float ss = detail::block_sum(row_sum_squares<V>(xr, first, stride, cols), shared);
  const float r = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (threadIdx.x == 0) rstd[row] = r;
  scale_row<V>(xr, w, y + row * cols, r, first, stride, cols);
}

template <int V>
__global__ void rmsnorm_backward_dx_kernel(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                           const float* __restrict__ rstd, const bf16_bits* __restrict__ dy,
                                           bf16_bits* __restrict__ dx, int64_t cols) {
  __shared__ float shared[32];
  const int64_t row = blockIdx.x;
  const bf16_bits* xr = x + row * cols;
  const bf16_bits* dyr = dy + row * cols;
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
  bf16_bits* dxr = dx + row * cols;
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

// Sum over the L lanes of a row's group (L a power of two <= 32; groups are L-aligned in the warp).
template <int L>
__device__ __forceinline__ float group_sum(float v) {
#pragma unroll
  for (int o = L / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Short rows, vectorised (8 BF16 a lane): L lanes per row, kThreads / L rows per block.
template <int L>
__global__ void rmsnorm_forward_rows_kernel(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                            bf16_bits* __restrict__ y, float* __restrict__ rstd, int64_t rows,
                                            int64_t cols, float eps) {
  constexpr int V = 8;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kThreads / L) + threadIdx.x / L;
  const int lane = static_cast<int>(threadIdx.x % L);
  const bool valid = row < rows;  // every lane joins the shuffles
  const bf16_bits* xr = x + (valid ? row : 0) * cols;
  const int64_t first = lane * V, stride = static_cast<int64_t>(L) * V;
  const float ss = group_sum<L>(valid ? row_sum_squares<V>(xr, first, stride, cols) : 0.0f);
  if (!valid) return;
  const float r = rsqrtf(ss / static_cast<float>(cols) + eps);
  if (lane == 0) rstd[row] = r;
  scale_row<V>(xr, w, y + row * cols, r, first, stride, cols);
}

template <int L>
__global__ void rmsnorm_backward_dx_rows_kernel(const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w,
                                                const float* __restrict__ rstd, const bf16_bits* __restrict__ dy,
                                                bf16_bits* __restrict__ dx, int64_t rows, int64_t cols) {
  constexpr int V = 8;
  const int64_t row = blockIdx.x * static_cast<int64_t>(kThreads / L) + threadIdx.x / L;
  const int lane = static_cast<int>(threadIdx.x % L);
  const bool valid = row < rows;
  const int64_t at = (valid ? row : 0) * cols;
  const float r = valid ? rstd[row] : 0.0f;
  float dot = 0;
  for (int64_t i = lane * V; valid && i < cols; i += L * V) {
    float xv[V], gv[V], dv[V];
    load<V>(x + at + i, xv);
    load<V>(w + i, gv);
    load<V>(dy + at + i, dv);
#pragma unroll
    for (int j = 0; j < V; ++j) dot += dv[j] * gv[j] * xv[j] * r;
  }
  dot = group_sum<L>(dot);
  if (!valid) return;
  const float mean = dot / static_cast<float>(cols);
  for (int64_t i = lane * V; i < cols; i += L * V) {
    float xv[V], gv[V], dv[V];
    load<V>(x + at + i, xv);
    load<V>(w + i, gv);
    load<V>(dy + at + i, dv);
#pragma unroll
    for (int j = 0; j < V; ++j) dv[j] = r * (dv[j] * gv[j] - xv[j] * r * mean);
    store<V>(dx + at + i, dv);
  }
}

// Lanes per row for a vectorised row of `cols` (8 BF16 a lane), 0 when a block per row is better.
int lanes_per_row(int64_t cols) {
  if (cols <= 8 * 8) return 8;
  if (cols <= 16 * 8) return 16;
  if (cols <= 32 * 8) return 32;
  return 0;
}

template <class Launch>
void launch_rows(int lanes, int64_t rows, Launch&& launch) {
  const auto grid = static_cast<unsigned>(detail::ceil_div(rows, kThreads / lanes));
  switch (lanes) {
    case 8: launch(std::integral_constant<int, 8>{}, grid); break;
    case 16: launch(std::integral_constant<int, 16>{}, grid); break;
    default: launch(std::integral_constant<int, 32>{}, grid); break;
  }
}

// dw over rows [begin, end) of one range: out[c] = sum of dy * x * rstd. Block (32, 32), blockIdx.y
// the range: each thread sums columns (c, c + 1) over the rows begin + y, begin + y + 32, ...; the
// 32 partial sums of a column are added in a fixed order.
constexpr int kDwRows = 32;
__global__ void rmsnorm_backward_dw_kernel(const bf16_bits* __restrict__ x, const float* __restrict__ rstd,
                                           const bf16_bits* __restrict__ dy, float* __restrict__ out, int64_t rows,
                                           int64_t cols, int64_t rows_per_range) {
  __shared__ float partial[kDwRows][65];
  const int64_t c = (blockIdx.x * 32 + threadIdx.x) * 2;
  const int64_t begin = blockIdx.y * rows_per_range;
  const int64_t end = begin + rows_per_range < rows ? begin + rows_per_range : rows;
  float a0 = 0, a1 = 0;
  if (c < cols) {
    const bool pair = c + 1 < cols;
    for (int64_t r = begin + threadIdx.y; r < end; r += kDwRows) {
      const float s = rstd[r];
      a0 += to_f(dy[r * cols + c]) * to_f(x[r * cols + c]) * s;
      if (pair) a1 += to_f(dy[r * cols + c + 1]) * to_f(x[r * cols + c + 1]) * s;
    }
  }
  partial[threadIdx.y][2 * threadIdx.x] = a0;
  partial[threadIdx.y][2 * threadIdx.x + 1] = a1;
  __syncthreads();
  if (threadIdx.y == 0) {
    float* o = out + blockIdx.y * cols;
    for (int k = 0; k < 2; ++k) {
      float sum = 0;
      for (int j = 0; j < kDwRows; ++j) sum += partial[j][2 * threadIdx.x + k];
      if (c + k < cols) o[c + k] = sum;
    }
  }
}

// dw[c] = the ranges' partial sums of column c, in range order.
__global__ void rmsnorm_dw_sum_kernel(const float* __restrict__ partial, float* __restrict__ dw, int64_t ranges,
                                      int64_t cols) {
  const int64_t c = blockIdx.x * static_cast<int64_t>(kThreads) + threadIdx.x;
  if (c >= cols) return;
  float sum = 0;
  for (int64_t r = 0; r < ranges; ++r) sum += partial[r * cols + c];
  dw[c] = sum;
}

// Row ranges of the dw reduction: about 512 blocks in all (a few per SM), each range at least 128
// rows.
int64_t dw_ranges(int64_t rows, int64_t cols) {
  const int64_t column_blocks = detail::ceil_div(cols, 64);
  const int64_t wanted = detail::ceil_div(512, column_blocks);
  const int64_t most = rows / 128 > 1 ? rows / 128 : 1;
  return wanted < most ? wanted : most;
}

}  // namespace

void rmsnorm_forward(const bf16_bits* x, const bf16_bits* w, bf16_bits* y, float* rstd, int64_t rows, int64_t cols, float eps,
                     cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>(rows);
  const int lanes = lanes_per_row(cols);
  if (lanes > 0 && detail::vectorizable(cols, {x, w, y})) {
    launch_rows(lanes, rows, [&](auto l, unsigned g) {
      rmsnorm_forward_rows_kernel<decltype(l)::value><<<g, kThreads, 0, stream>>>(x, w, y, rstd, rows, cols, eps);
    });
  } else if (detail::vectorizable(cols, {x, w, y})) {
    rmsnorm_forward_kernel<8><<<grid, kThreads, 0, stream>>>(x, w, y, rstd, cols, eps);
  } else {
    rmsnorm_forward_kernel<1><<<grid, kThreads, 0, stream>>>(x, w, y, rstd, cols, eps);
  }
  MOESIM_LAUNCH_CHECK();
}

int64_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t cols) {
  const int64_t ranges = dw_ranges(rows, cols);
  return ranges > 1 ? ranges * cols : 0;
}

void rmsnorm_backward(const bf16_bits* x, const bf16_bits* w, const float* rstd, const bf16_bits* dy, bf16_bits* dx, float* dw,
                      int64_t rows, int64_t cols, float* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  const auto grid = static_cast<unsigned>(rows);
  const int lanes = lanes_per_row(cols);
  if (lanes > 0 && detail::vectorizable(cols, {x, w, dy, dx})) {
    launch_rows(lanes, rows, [&](auto l, unsigned g) {
      rmsnorm_backward_dx_rows_kernel<decltype(l)::value><<<g, kThreads, 0, stream>>>(x, w, rstd, dy, dx, rows, cols);
    });
  } else if (detail::vectorizable(cols, {x, w, dy, dx})) {
    rmsnorm_backward_dx_kernel<8><<<grid, kThreads, 0, stream>>>(x, w, rstd, dy, dx, cols);
  } else {
    rmsnorm_backward_dx_kernel<1><<<grid, kThreads, 0, stream>>>(x, w, rstd, dy, dx, cols);
  }
  MOESIM_LAUNCH_CHECK();
  const int64_t ranges = dw_ranges(rows, cols);
  if (ranges > 1 && scratch == nullptr) throw std::invalid_argument("rmsnorm_backward: dw needs rmsnorm_backward_scratch_floats of scratch");
  const dim3 dw_grid(static_cast<unsigned>(detail::ceil_div(cols, 64)), static_cast<unsigned>(ranges));
  rmsnorm_backward_dw_kernel<<<dw_grid, dim3(32, kDwRows), 0, stream>>>(x, rstd, dy, ranges > 1 ? scratch : dw, rows, cols,
                                                                      detail::ceil_div(rows, ranges));
  MOESIM_LAUNCH_CHECK();
  if (ranges > 1) {
    rmsnorm_dw_sum_kernel<<<static_cast<unsigned>(detail::ceil_div(cols, kThreads)), kThreads, 0, stream>>>(scratch, dw, ranges,
                                                                                                            cols);
    MOESIM_LAUNCH_CHECK();
  }
}

}  // namespace moesim::cuda
