// SPDX-License-Identifier: MIT
// The executor's own small kernels (op_kernels.hpp, section "executor kernels"): the ops the
// backend's kernel set (kernels.hpp) has no launcher for - the embedding gather, the depthwise
// causal short convolution of KDA, the Attention Residuals mix, GQA's key/value head expansion
// (for the backend's attention kernels, which take k with q's heads), and the traffic of FSDP2's
// copies (move_bytes). Memory-bound, FP32 math,
// grid-stride loops; each launcher computes its grid with a ceil-div and checks the launch.
#include "backend/cuda/op_kernels.hpp"

#include <algorithm>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda::exec_kernels {
namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(std::min<int64_t>(std::max<int64_t>(b, 1), 65535 * 8));
}

// BF16 element i as FP32, and FP32 rounded (to nearest even) into element i: kernels_common.cuh's casts.
__device__ float load(const bf16_bits* p, int64_t i) { return detail::to_f(p[i]); }
__device__ void store(bf16_bits* p, int64_t i, float v) { p[i] = detail::to_bf(v); }

__global__ void gather_rows_kernel(const bf16_bits* table, const int32_t* ids, int64_t rows, int64_t cols,
                                   int64_t table_rows, bf16_bits* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    int64_t src = ids[r];
    src = src < 0 ? 0 : (src >= table_rows ? table_rows - 1 : src);
    out[i] = table[src * cols + c];
  }
}

// grad[ids[r]] += dy[r] (ids clamped to the table; FP32 atomics: rows of one token add up).
__global__ void scatter_add_rows_kernel(const bf16_bits* dy, const int32_t* ids, int64_t rows, int64_t cols,
                                        int64_t table_rows, float* grad) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    int64_t dst = ids[r];
    dst = dst < 0 ? 0 : (dst >= table_rows ? table_rows - 1 : dst);
    atomicAdd(grad + dst * cols + c, load(dy, i));
  }
}

// y[t, c] = sum_j w[c, j] x[t - j, c] (causal, zero before the sequence start).
__global__ void short_conv_kernel(const bf16_bits* x, const bf16_bits* w, int64_t rows, int64_t channels, int width,
                                  bool reverse, bf16_bits* y) {
  const int64_t n = rows * channels;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t t = i / channels, c = i % channels;
    float acc = 0;
    for (int j = 0; j < width; ++j) {
      const int64_t s = reverse ? t + j : t - j;  // the backward runs the convolution transposed
      if (s >= 0 && s < rows) acc += load(w, c * width + j) * load(x, s * channels + c);
    }
    store(y, i, acc);
  }
}

// The same over tiles of kConvRows rows x 8 channels a thread (channels a multiple of 8, rows
// 16-byte aligned): a thread reads each row of its tile once as one 16-byte access, plus the W - 1
// rows the tile's first outputs reach back to, and keeps the last W rows in registers. The
// per-element kernel above (a 64-bit division and W scalar loads an output) ran K3's short
// convolutions at a sixth of the copy bandwidth (7.6 ms against 1.3 predicted, 2026-12-03).
constexpr int kConvRows = 32;
template <int W>
__global__ void short_conv_tile_kernel(const bf16_bits* x, const bf16_bits* w, int64_t rows, int64_t channels, bool reverse,
                                       bf16_bits* y) {
  constexpr int V = 8;
  const int64_t c0 = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * V;
  if (c0 >= channels) return;
  const int64_t first = blockIdx.y * static_cast<int64_t>(kConvRows);
  const int64_t last = first + kConvRows < rows ? first + kConvRows : rows;  // exclusive
  float wv[W][V];
#pragma unroll
  for (int k = 0; k < V; ++k) {
#pragma unroll
    for (int j = 0; j < W; ++j) wv[j][k] = load(w, (c0 + k) * W + j);
  }
  // window[j]: the row j steps back (forward) or ahead (reverse) of the current one; zero outside.
  float window[W][V] = {};
  const int64_t steps = last - first + W - 1;
  for (int64_t n = 0; n < steps; ++n) {
    const int64_t t = reverse ? last - 1 + (W - 1) - n : first - (W - 1) + n;  // the row read now
#pragma unroll
    for (int j = W - 1; j > 0; --j) {
#pragma unroll
      for (int k = 0; k < V; ++k) window[j][k] = window[j - 1][k];
    }
    if (t >= 0 && t < rows) {
      detail::load<V>(x + t * channels + c0, window[0]);
    } else {
#pragma unroll
      for (int k = 0; k < V; ++k) window[0][k] = 0;
    }
    if (n < W - 1) continue;  // the window is not full yet
    float out[V];
#pragma unroll
    for (int k = 0; k < V; ++k) {
      float acc = 0;
#pragma unroll
      for (int j = 0; j < W; ++j) acc += wv[j][k] * window[j][k];
      out[k] = acc;
    }
    detail::store<V>(y + t * channels + c0, out);
  }
}

// y = sum_s a[s] x_s over `sources` stacked inputs of n elements each; V elements a thread (V = 8:
// 16-byte accesses, when n is a multiple of 8 and the pointers aligned).
template <int V>
__global__ void mix_kernel(const bf16_bits* x, const float* a, int sources, int64_t n, bf16_bits* y) {
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * V; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * V) {
    float acc[V] = {};
    for (int s = 0; s < sources; ++s) {
      float v[V];
      detail::load<V>(x + s * n + i, v);
      const float as = a[s];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += as * v[k];
    }
    detail::store<V>(y + i, acc);
  }
}

// dx_s = a[s] dy for every source (the mix's input gradients).
template <int V>
__global__ void mix_backward_kernel(const bf16_bits* dy, const float* a, int sources, int64_t n, bf16_bits* dx) {
  for (int64_t i = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * V; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x * V) {
    float g[V];
    detail::load<V>(dy + i, g);
    for (int s = 0; s < sources; ++s) {
      float o[V];
      const float as = a[s];
#pragma unroll
      for (int k = 0; k < V; ++k) o[k] = as * g[k];
      detail::store<V>(dx + s * n + i, o);
    }
  }
}

// y[r, j * group + g, :] = x[r, j, :]: GQA key/value heads expanded to the query heads.
__global__ void repeat_kv_heads_kernel(const bf16_bits* x, int64_t rows, int64_t heads_kv, int group, int64_t d,
                                       bf16_bits* y) {
  const int64_t n = rows * heads_kv * group * d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % d, h = (i / d) % (heads_kv * group), r = i / (d * heads_kv * group);
    y[i] = x[(r * heads_kv + h / group) * d + c];
  }
}

// dx[r, j, :] = sum_g dy[r, j * group + g, :] (the expansion's adjoint, FP32).
__global__ void sum_kv_head_groups_kernel(const float* dy, int64_t rows, int64_t heads_kv, int group, int64_t d,
                                          float* dx) {
  const int64_t n = rows * heads_kv * d;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i % d, rj = i / d;  // rj = r * heads_kv + j
    float acc = 0;
    for (int g = 0; g < group; ++g) acc += dy[(rj * group + g) * d + c];
    dx[i] = acc;
  }
}

// move_bytes: each thread takes 8 consecutive outputs at a time, their loads independent of one
// another (8 in flight a thread: one 2-byte load per output in a loop ran at 40% of the bandwidth,
// 2026-12-03), the 8 outputs stored as one 16-byte access where aligned. Fold (n_in >= n_out):
// out[i] = in[i] + in[i + n_out] + ...; else out[i] = in[floor(i x ratio)], ratio = n_in / n_out
// in double, as the reference computes it (a 128-bit integer division per element ran at 2%).
template <bool kFold>
__global__ void move_bytes_kernel(const bf16_bits* in, int64_t n_in, double ratio, bf16_bits* out, int64_t n_out,
                                  bool aligned) {
  constexpr int V = 8;
  for (int64_t base = (blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) * V; base < n_out;
       base += static_cast<int64_t>(gridDim.x) * blockDim.x * V) {
    float v[V] = {};
    if constexpr (kFold) {
      for (int64_t k = base; k < n_in; k += n_out) {
#pragma unroll
        for (int j = 0; j < V; ++j) {
          if (base + j < n_out && k + j < n_in) v[j] += detail::to_f(in[k + j]);
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) {
        if (base + j >= n_out) continue;
        const auto from = static_cast<int64_t>(static_cast<double>(base + j) * ratio);
        v[j] = detail::to_f(in[from < n_in ? from : n_in - 1]);
      }
    }
    if (aligned && base + V <= n_out) {
      detail::store<V>(out + base, v);
    } else {
      for (int j = 0; j < V && base + j < n_out; ++j) out[base + j] = detail::to_bf(v[j]);
    }
  }
}

}  // namespace

void repeat_kv_heads(const bf16_bits* x, int64_t rows, int64_t heads_kv, int group, int64_t d, bf16_bits* y,
                     cudaStream_t stream) {
  repeat_kv_heads_kernel<<<blocks_for(rows * heads_kv * group * d), kThreads, 0, stream>>>(x, rows, heads_kv, group, d, y);
  MOESIM_LAUNCH_CHECK();
}

void sum_kv_head_groups(const float* dy, int64_t rows, int64_t heads_kv, int group, int64_t d, float* dx,
                        cudaStream_t stream) {
  sum_kv_head_groups_kernel<<<blocks_for(rows * heads_kv * d), kThreads, 0, stream>>>(dy, rows, heads_kv, group, d, dx);
  MOESIM_LAUNCH_CHECK();
}

void gather_rows(const bf16_bits* table, const int32_t* ids, int64_t rows, int64_t cols, int64_t table_rows, bf16_bits* out,
                 cudaStream_t stream) {
  gather_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(table, ids, rows, cols, table_rows, out);
  MOESIM_LAUNCH_CHECK();
}

void scatter_add_rows(const bf16_bits* dy, const int32_t* ids, int64_t rows, int64_t cols, int64_t table_rows, float* grad,
                      cudaStream_t stream) {
  scatter_add_rows_kernel<<<blocks_for(rows * cols), kThreads, 0, stream>>>(dy, ids, rows, cols, table_rows, grad);
  MOESIM_LAUNCH_CHECK();
}

void short_conv(const bf16_bits* x, const bf16_bits* w, int64_t rows, int64_t channels, int width, bool transposed,
                bf16_bits* y, cudaStream_t stream) {
  if (rows <= 0 || channels <= 0) return;
  const bool tiled = (width == 3 || width == 4) && detail::vectorizable(channels, {x, y}) &&
                     detail::ceil_div(rows, kConvRows) <= 65535;  // the grid's y dimension
  if (!tiled) {
    short_conv_kernel<<<blocks_for(rows * channels), kThreads, 0, stream>>>(x, w, rows, channels, width, transposed, y);
  } else {
    constexpr int kConvThreads = 128;
    const dim3 grid(static_cast<unsigned>(detail::ceil_div(channels / 8, kConvThreads)),
                    static_cast<unsigned>(detail::ceil_div(rows, kConvRows)));
    if (width == 4) {
      short_conv_tile_kernel<4><<<grid, kConvThreads, 0, stream>>>(x, w, rows, channels, transposed, y);
    } else {
      short_conv_tile_kernel<3><<<grid, kConvThreads, 0, stream>>>(x, w, rows, channels, transposed, y);
    }
  }
  MOESIM_LAUNCH_CHECK();
}

void move_bytes(const bf16_bits* in, int64_t n_in, bf16_bits* out, int64_t n_out, cudaStream_t stream) {
  if (n_out <= 0) return;
  // Enough blocks to fill the GPU; each thread loops over the rest.
  const auto blocks = static_cast<unsigned>(std::min<int64_t>(blocks_for((n_out + 7) / 8), 4096));
  const bool aligned = reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const double ratio = static_cast<double>(n_in) / static_cast<double>(n_out);
  if (n_in >= n_out) {
    move_bytes_kernel<true><<<blocks, kThreads, 0, stream>>>(in, n_in, ratio, out, n_out, aligned);
  } else {
    move_bytes_kernel<false><<<blocks, kThreads, 0, stream>>>(in, n_in, ratio, out, n_out, aligned);
  }
  MOESIM_LAUNCH_CHECK();
}

void residual_mix(const bf16_bits* x, const float* weights, int sources, int64_t n, bf16_bits* y, cudaStream_t stream) {
  if (detail::vectorizable(n, {x, y})) {
    mix_kernel<8><<<blocks_for(n / 8), kThreads, 0, stream>>>(x, weights, sources, n, y);
  } else {
    mix_kernel<1><<<blocks_for(n), kThreads, 0, stream>>>(x, weights, sources, n, y);
  }
  MOESIM_LAUNCH_CHECK();
}

void residual_mix_backward(const bf16_bits* dy, const float* weights, int sources, int64_t n, bf16_bits* dx,
                           cudaStream_t stream) {
  if (detail::vectorizable(n, {dy, dx})) {
    mix_backward_kernel<8><<<blocks_for(n / 8), kThreads, 0, stream>>>(dy, weights, sources, n, dx);
  } else {
    mix_backward_kernel<1><<<blocks_for(n), kThreads, 0, stream>>>(dy, weights, sources, n, dx);
  }
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda::exec_kernels
