// SPDX-License-Identifier: MIT
// RMSNorm forward and backward. Forward: one block per row, FP32 statistics, 16-byte vector
// accesses (8 BF16) when the row length and pointers allow; rows of at most 256 vectorised elements
// (QK-norm's per-head rows of 128) take L = 8, 16 or 32 lanes of a warp each instead, as a block per
// row would leave most of its threads idle and pay a block's start-up per row (a 256-thread block
// per row of 128: 2.1 ms for 262,144 rows on an H200, 2026-12-01).
//
// Backward, vectorised rows of up to 8,192 elements: one kernel reads x and dy from memory once
// per row (its second pass over the row hits L1), writes dx and adds the row's dy * xhat into the
// dw partial sums of the threads that own its columns, over a range of rows per block (up to 512
// ranges of at least 16 rows); a second kernel adds the ranges' partial sums in range order
// (deterministic). Transformer Engine's and Apex's norm backward work the same way. Other rows
// (odd widths, wider ones): dx a block per row, then dw as a column reduction over the same ranges
// of rows (one block per 64 columns over all rows had left a 128-wide QK-norm's 524,288 rows to 2
// blocks: 8.4 ms, 2026-12-03).
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

// Ranges of rows the backward's dw is summed over (each block one range): up to 512 (about four
// blocks per SM of an H100 or H200), at least 16 rows each. The same for every path, so that the
// scratch it needs is known before the pointers.
int64_t dw_ranges(int64_t rows) {
  const int64_t ranges = detail::ceil_div(rows, 16);
  return ranges < 1 ? 1 : ranges > 512 ? 512 : ranges;
}

// Fused backward of wide rows (256 threads x 8 elements x C chunks a row): a block takes rows
// [begin, end) one at a time: the row's dot product (a block sum), then dx and the dw partial sums
// of the thread's columns, which stay in registers over the range. The second pass reads the row
// again, from L1 (a row of 7,168 BF16 is 14 KB); keeping it in registers instead took 204
// registers a thread at C = 4 (one block per SM). out: this range's dw partial sums (row
// `blockIdx.x` of the scratch, or dw itself).
constexpr int kMaxChunks = 4;
template <int kChunks>
__global__ void __launch_bounds__(kThreads) rmsnorm_backward_fused_kernel(
    const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w, const float* __restrict__ rstd,
    const bf16_bits* __restrict__ dy, bf16_bits* __restrict__ dx, float* __restrict__ out, int64_t rows, int64_t cols,
    int64_t rows_per_range) {
  constexpr int V = 8;
  __shared__ float shared[32];
  const int64_t begin = blockIdx.x * rows_per_range;
  const int64_t end = begin + rows_per_range < rows ? begin + rows_per_range : rows;
  float acc[kChunks][V];
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
#pragma unroll
    for (int j = 0; j < V; ++j) acc[k][j] = 0;
  }
  for (int64_t row = begin; row < end; ++row) {
    const float r = rstd[row];
    const int64_t at = row * cols;
    // The row's elements of chunk k of this thread (false past the row's end).
    const auto chunk = [&](int k, float* xv, float* gv, float* dv) {
      const int64_t i = (static_cast<int64_t>(k) * kThreads + threadIdx.x) * V;
      if (i >= cols) return false;
      load<V>(x + at + i, xv);
      load<V>(w + i, gv);
      load<V>(dy + at + i, dv);
      return true;
    };
    float dot = 0;
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      float xv[V], gv[V], dv[V];
      if (!chunk(k, xv, gv, dv)) continue;
#pragma unroll
      for (int j = 0; j < V; ++j) dot += dv[j] * gv[j] * xv[j] * r;
    }
    const float mean = detail::block_sum(dot, shared) / static_cast<float>(cols);
#pragma unroll
    for (int k = 0; k < kChunks; ++k) {
      float xv[V], gv[V], dv[V];
      if (!chunk(k, xv, gv, dv)) continue;
      const int64_t i = (static_cast<int64_t>(k) * kThreads + threadIdx.x) * V;
#pragma unroll
      for (int j = 0; j < V; ++j) {
        const float xhat = xv[j] * r;
        acc[k][j] += dv[j] * xhat;
        dv[j] = r * (dv[j] * gv[j] - xhat * mean);
      }
      store<V>(dx + at + i, dv);
    }
  }
  float* o = out + blockIdx.x * cols;
#pragma unroll
  for (int k = 0; k < kChunks; ++k) {
    const int64_t i = (static_cast<int64_t>(k) * kThreads + threadIdx.x) * V;
    if (i >= cols) continue;
#pragma unroll
    for (int j = 0; j < V; ++j) o[i + j] = acc[k][j];
  }
}

// Fused backward of short rows (L lanes per row, 8 elements a lane: cols <= 8 L): the block's
// kThreads / L lane groups take the rows of its range in turn (group g the rows begin + g,
// begin + g + groups, ...), each lane keeping its 8 columns' dw partial sums; the groups' sums
// then meet in shared memory, added in group order.
template <int L>
__global__ void __launch_bounds__(kThreads) rmsnorm_backward_fused_rows_kernel(
    const bf16_bits* __restrict__ x, const bf16_bits* __restrict__ w, const float* __restrict__ rstd,
    const bf16_bits* __restrict__ dy, bf16_bits* __restrict__ dx, float* __restrict__ out, int64_t rows, int64_t cols,
    int64_t rows_per_range) {
  constexpr int V = 8;
  constexpr int kGroups = kThreads / L;
  __shared__ float partial[kGroups][8 * L];
  const int group = static_cast<int>(threadIdx.x / L);
  const int lane = static_cast<int>(threadIdx.x % L);
  const int64_t i = static_cast<int64_t>(lane) * V;
  const bool mine = i < cols;
  const int64_t begin = blockIdx.x * rows_per_range;
  const int64_t end = begin + rows_per_range < rows ? begin + rows_per_range : rows;
  float gw[V], acc[V];
#pragma unroll
  for (int j = 0; j < V; ++j) acc[j] = gw[j] = 0;
  if (mine) load<V>(w + i, gw);
  // Every lane of the block runs the same number of rounds (a warp's shuffles need all its lanes):
  // a group whose row is past the range's end adds nothing.
  for (int64_t first = begin; first < end; first += kGroups) {
    const int64_t row = first + group;
    const bool valid = row < end;
    const float r = valid ? rstd[row] : 0.0f;
    const int64_t at = (valid ? row : 0) * cols;
    float xv[V] = {}, dv[V] = {};
    if (mine && valid) {
      load<V>(x + at + i, xv);
      load<V>(dy + at + i, dv);
    }
    float dot = 0;
#pragma unroll
    for (int j = 0; j < V; ++j) dot += dv[j] * gw[j] * xv[j] * r;
    const float mean = group_sum<L>(dot) / static_cast<float>(cols);
    if (!mine || !valid) continue;
    float o[V];
#pragma unroll
    for (int j = 0; j < V; ++j) {
      const float xhat = xv[j] * r;
      acc[j] += dv[j] * xhat;
      o[j] = r * (dv[j] * gw[j] - xhat * mean);
    }
    store<V>(dx + at + i, o);
  }
#pragma unroll
  for (int j = 0; j < V; ++j) partial[group][lane * V + j] = acc[j];
  __syncthreads();
  for (int64_t c = threadIdx.x; c < cols; c += kThreads) {
    float sum = 0;
    for (int g = 0; g < kGroups; ++g) sum += partial[g][c];
    out[blockIdx.x * cols + c] = sum;
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
  const int64_t ranges = dw_ranges(rows);
  return ranges > 1 ? ranges * cols : 0;
}

void rmsnorm_backward(const bf16_bits* x, const bf16_bits* w, const float* rstd, const bf16_bits* dy, bf16_bits* dx, float* dw,
                      int64_t rows, int64_t cols, float* scratch, cudaStream_t stream) {
  if (rows == 0) return;
  const int64_t ranges = dw_ranges(rows);
  if (ranges > 1 && scratch == nullptr) throw BackendError("rmsnorm_backward: dw needs rmsnorm_backward_scratch_floats of scratch");
  float* partial = ranges > 1 ? scratch : dw;
  const int64_t rows_per_range = detail::ceil_div(rows, ranges);
  const auto blocks = static_cast<unsigned>(ranges);
  const int lanes = lanes_per_row(cols);
  const bool vectorised = detail::vectorizable(cols, {x, w, dy, dx});
  if (vectorised && lanes > 0) {
    switch (lanes) {
      case 8: rmsnorm_backward_fused_rows_kernel<8><<<blocks, kThreads, 0, stream>>>(x, w, rstd, dy, dx, partial, rows, cols, rows_per_range); break;
      case 16: rmsnorm_backward_fused_rows_kernel<16><<<blocks, kThreads, 0, stream>>>(x, w, rstd, dy, dx, partial, rows, cols, rows_per_range); break;
      default: rmsnorm_backward_fused_rows_kernel<32><<<blocks, kThreads, 0, stream>>>(x, w, rstd, dy, dx, partial, rows, cols, rows_per_range); break;
    }
    MOESIM_LAUNCH_CHECK();
  } else if (vectorised && cols <= static_cast<int64_t>(kMaxChunks) * kThreads * 8) {
    // As many register chunks as the row needs: fewer registers, more blocks per SM.
    const auto launch = [&](auto chunks) {
      rmsnorm_backward_fused_kernel<decltype(chunks)::value><<<blocks, kThreads, 0, stream>>>(x, w, rstd, dy, dx, partial, rows, cols,
                                                                                              rows_per_range);
    };
    switch (detail::ceil_div(cols, kThreads * 8)) {
      case 1: launch(std::integral_constant<int, 1>{}); break;
      case 2: launch(std::integral_constant<int, 2>{}); break;
      case 3: launch(std::integral_constant<int, 3>{}); break;
      default: launch(std::integral_constant<int, 4>{}); break;
    }
    MOESIM_LAUNCH_CHECK();
  } else {
    const auto grid = static_cast<unsigned>(rows);
    if (vectorised) {
      rmsnorm_backward_dx_kernel<8><<<grid, kThreads, 0, stream>>>(x, w, rstd, dy, dx, cols);
    } else {
      rmsnorm_backward_dx_kernel<1><<<grid, kThreads, 0, stream>>>(x, w, rstd, dy, dx, cols);
    }
    MOESIM_LAUNCH_CHECK();
    const dim3 dw_grid(static_cast<unsigned>(detail::ceil_div(cols, 64)), blocks);
    rmsnorm_backward_dw_kernel<<<dw_grid, dim3(32, kDwRows), 0, stream>>>(x, rstd, dy, partial, rows, cols, rows_per_range);
    MOESIM_LAUNCH_CHECK();
  }
  if (ranges > 1) {
    rmsnorm_dw_sum_kernel<<<static_cast<unsigned>(detail::ceil_div(cols, kThreads)), kThreads, 0, stream>>>(scratch, dw, ranges,
                                                                                                            cols);
    MOESIM_LAUNCH_CHECK();
  }
}

}  // namespace moesim::cuda
