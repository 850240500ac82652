// SPDX-License-Identifier: MIT
// MLA causal softmax attention, forward and backward; see mla_attention.hpp. This file: the
// launchers (dispatching to the tensor-core variant in mla_attention_tc.cu by default), the
// rowsum(dO * O) kernel both backwards share, and the SIMT variant: FP32 tiles of 32 queries x 32
// keys, 8 warps, each warp owning 4 rows (queries in the forward and dq kernels, keys in the dk/dv
// kernel) so that row reductions are warp shuffles.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cuda/attention/mla_attention.hpp"
#include "backend/cuda/attention/mla_attention_tc.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::to_bf;
using detail::to_f;
using detail::warp_max;
using detail::warp_sum;

constexpr int kTile = 32;  // queries and keys per tile
constexpr int kRows = 4;   // rows per warp (8 warps x 4 = 32)
constexpr int kThreads = 256;

__device__ __forceinline__ int64_t row_index(int b, int t, int h, int T, int H) {
  return (static_cast<int64_t>(b) * T + t) * H + h;
}

// Fills a [kTile][stride] FP32 tile from rows t0.. of a [B, T, H, dim] BF16 tensor (zeros past T).
template <int Dim>
__device__ __forceinline__ void load_rows(float* dst, int stride, const bf16_bits* __restrict__ src, int b, int t0,
                                          int h, int T, int H, float mul) {
  for (int e = threadIdx.x; e < kTile * Dim; e += kThreads) {
    const int i = e / Dim, c = e % Dim, t = t0 + i;
    dst[i * stride + c] = t < T ? to_f(src[row_index(b, t, h, T, H) * Dim + c]) * mul : 0.f;
  }
}

template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads)
    mla_fwd_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                   const bf16_bits* __restrict__ v, float scale, bf16_bits* __restrict__ o, float* __restrict__ lse) {
  extern __shared__ float sm[];
  float* qs = sm;                      // [32][DQK], pre-scaled
  float* ks = qs + kTile * DQK;        // [32][DQK + 1]
  float* vs = ks + kTile * (DQK + 1);  // [32][DV]
  float* ps = vs + kTile * DV;         // [32][33]
  const int h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q0 = blockIdx.x * kTile;
  constexpr int kCols = DV / 32;
  load_rows<DQK>(qs, DQK, q, b, q0, h, T, H, scale);
  float m[kRows], l[kRows], acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.f;
    for (int e = 0; e < kCols; ++e) acc[r][e] = 0.f;
  }
  const int num_kt = min(T - 1, q0 + kTile - 1) / kTile + 1;
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_rows<DQK>(ks, DQK + 1, k, b, k0, h, T, H, 1.f);
    load_rows<DV>(vs, DV, v, b, k0, h, T, H, 1.f);
    __syncthreads();
    float sc[kRows] = {};
    for (int c = 0; c < DQK; ++c) {
      const float kv = ks[lane * (DQK + 1) + c];
      for (int r = 0; r < kRows; ++r) sc[r] += qs[(warp + 8 * r) * DQK + c] * kv;
    }
    const int kj = k0 + lane;
    for (int r = 0; r < kRows; ++r) {
      const int i = warp + 8 * r;
      // Key 0 is valid for every row, so m is finite from the first tile on.
      const bool valid = kj <= q0 + i && kj < T;
      const float s = valid ? sc[r] : -INFINITY;
      const float mnew = fmaxf(m[r], warp_max(s));
      const float p = valid ? __expf(s - mnew) : 0.f;
      const float corr = __expf(m[r] - mnew);
      l[r] = l[r] * corr + warp_sum(p);
      m[r] = mnew;
      ps[i * 33 + lane] = p;
      for (int e = 0; e < kCols; ++e) acc[r][e] *= corr;
    }
    __syncwarp();
    for (int j = 0; j < kTile; ++j) {
      for (int e = 0; e < kCols; ++e) {
        const float vv = vs[j * DV + lane + 32 * e];
        for (int r = 0; r < kRows; ++r) acc[r][e] += ps[(warp + 8 * r) * 33 + j] * vv;
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const int t = q0 + warp + 8 * r;
    if (t >= T) continue;
    const float inv = 1.f / l[r];
    for (int e = 0; e < kCols; ++e) o[row_index(b, t, h, T, H) * DV + lane + 32 * e] = to_bf(acc[r][e] * inv);
    if (lane == 0) lse[(static_cast<int64_t>(b) * H + h) * T + t] = m[r] + logf(l[r]);
  }
}

// D[b, h, t] = sum_d dO * O, one warp per row.
template <int DV>
__global__ void mla_dot_kernel(int T, int H, int64_t rows, const bf16_bits* __restrict__ o,
                               const bf16_bits* __restrict__ d_o, float* __restrict__ dsum) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float acc = 0.f;
  for (int d = lane; d < DV; d += 32) acc += to_f(o[row * DV + d]) * to_f(d_o[row * DV + d]);
  acc = warp_sum(acc);
  // row = (b * T + t) * H + h  ->  [B, H, T]
  const int64_t h = row % H, bt = row / H, t = bt % T, b = bt / T;
  if (lane == 0) dsum[(b * H + h) * T + t] = acc;
}

// dQ_i = scale sum_j P_ij (dP_ij - D_i) K_j with P recomputed from lse; query-major.
template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads)
    mla_dq_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                  const bf16_bits* __restrict__ v, const bf16_bits* __restrict__ d_o, const float* __restrict__ lse,
                  const float* __restrict__ dsum, float scale, float* __restrict__ dq) {
  extern __shared__ float sm[];
  float* qs = sm;                      // [32][DQK]
  float* dos = qs + kTile * DQK;       // [32][DV]
  float* ks = dos + kTile * DV;        // [32][DQK + 1]
  float* vs = ks + kTile * (DQK + 1);  // [32][DV + 1]
  float* dss = vs + kTile * (DV + 1);  // [32][33]
  const int h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int q0 = blockIdx.x * kTile;
  constexpr int kCols = DQK / 32;
  load_rows<DQK>(qs, DQK, q, b, q0, h, T, H, scale);
  load_rows<DV>(dos, DV, d_o, b, q0, h, T, H, 1.f);
  float lse_r[kRows], d_r[kRows], acc[kRows][kCols];
  for (int r = 0; r < kRows; ++r) {
    const int t = min(q0 + warp + 8 * r, T - 1);
    lse_r[r] = lse[(static_cast<int64_t>(b) * H + h) * T + t];
    d_r[r] = dsum[(static_cast<int64_t>(b) * H + h) * T + t];
    for (int e = 0; e < kCols; ++e) acc[r][e] = 0.f;
  }
  const int num_kt = min(T - 1, q0 + kTile - 1) / kTile + 1;
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * kTile;
    __syncthreads();
    load_rows<DQK>(ks, DQK + 1, k, b, k0, h, T, H, 1.f);
    load_rows<DV>(vs, DV + 1, v, b, k0, h, T, H, 1.f);
    __syncthreads();
    float sc[kRows] = {}, dp[kRows] = {};
    for (int c = 0; c < DQK; ++c) {
      const float kv = ks[lane * (DQK + 1) + c];
      for (int r = 0; r < kRows; ++r) sc[r] += qs[(warp + 8 * r) * DQK + c] * kv;
    }
    for (int d = 0; d < DV; ++d) {
      const float vv = vs[lane * (DV + 1) + d];
      for (int r = 0; r < kRows; ++r) dp[r] += dos[(warp + 8 * r) * DV + d] * vv;
    }
    const int kj = k0 + lane;
    for (int r = 0; r < kRows; ++r) {
      const int i = warp + 8 * r;
      const bool valid = kj <= q0 + i && kj < T && q0 + i < T;
      const float p = valid ? __expf(sc[r] - lse_r[r]) : 0.f;
      dss[i * 33 + lane] = p * (dp[r] - d_r[r]);
    }
    __syncwarp();
    for (int j = 0; j < kTile; ++j) {
      for (int e = 0; e < kCols; ++e) {
        const float kv = ks[j * (DQK + 1) + lane + 32 * e];
        for (int r = 0; r < kRows; ++r) acc[r][e] += dss[(warp + 8 * r) * 33 + j] * kv;
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const int t = q0 + warp + 8 * r;
    if (t >= T) continue;
    for (int e = 0; e < kCols; ++e) dq[row_index(b, t, h, T, H) * DQK + lane + 32 * e] = scale * acc[r][e];
  }
}

// dV_j = sum_i P_ij dO_i, dK_j = scale sum_i dS_ij Q_i; key-major over query tiles i >= j.
template <int DQK, int DV>
__global__ void __launch_bounds__(kThreads)
    mla_dkdv_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                    const bf16_bits* __restrict__ v, const bf16_bits* __restrict__ d_o, const float* __restrict__ lse,
                    const float* __restrict__ dsum, float scale, float* __restrict__ dk, float* __restrict__ dv) {
  extern __shared__ float sm[];
  float* ks = sm;                       // [32][DQK], pre-scaled
  float* vs = ks + kTile * DQK;         // [32][DV]
  float* qs = vs + kTile * DV;          // [32][DQK + 1]
  float* dos = qs + kTile * (DQK + 1);  // [32][DV + 1]
  float* ps = dos + kTile * (DV + 1);   // [32][33]
  float* dss = ps + kTile * 33;         // [32][33]
  float* lse_s = dss + kTile * 33;      // [32]
  float* d_s = lse_s + kTile;           // [32]
  const int h = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int k0 = blockIdx.x * kTile;
  constexpr int kColsK = DQK / 32, kColsV = DV / 32;
  load_rows<DQK>(ks, DQK, k, b, k0, h, T, H, scale);
  load_rows<DV>(vs, DV, v, b, k0, h, T, H, 1.f);
  float ak[kRows][kColsK], av[kRows][kColsV];
  for (int r = 0; r < kRows; ++r) {
    for (int e = 0; e < kColsK; ++e) ak[r][e] = 0.f;
    for (int e = 0; e < kColsV; ++e) av[r][e] = 0.f;
  }
  const int num_qt = (T + kTile - 1) / kTile;
  for (int qt = blockIdx.x; qt < num_qt; ++qt) {
    const int q0 = qt * kTile;
    __syncthreads();
    load_rows<DQK>(qs, DQK + 1, q, b, q0, h, T, H, 1.f);
    load_rows<DV>(dos, DV + 1, d_o, b, q0, h, T, H, 1.f);
    if (threadIdx.x < kTile) {
      const int t = min(q0 + static_cast<int>(threadIdx.x), T - 1);
      lse_s[threadIdx.x] = lse[(static_cast<int64_t>(b) * H + h) * T + t];
      d_s[threadIdx.x] = dsum[(static_cast<int64_t>(b) * H + h) * T + t];
    }
    __syncthreads();
    float sc[kRows] = {}, dp[kRows] = {};
    for (int c = 0; c < DQK; ++c) {
      const float qv = qs[lane * (DQK + 1) + c];
      for (int r = 0; r < kRows; ++r) sc[r] += ks[(warp + 8 * r) * DQK + c] * qv;
    }
    for (int d = 0; d < DV; ++d) {
      const float dov = dos[lane * (DV + 1) + d];
      for (int r = 0; r < kRows; ++r) dp[r] += vs[(warp + 8 * r) * DV + d] * dov;
    }
    const int qi = q0 + lane;
    for (int r = 0; r < kRows; ++r) {
      const int j = warp + 8 * r;
      const bool valid = qi >= k0 + j && qi < T && k0 + j < T;
      const float p = valid ? __expf(sc[r] - lse_s[lane]) : 0.f;
      ps[j * 33 + lane] = p;
      dss[j * 33 + lane] = p * (dp[r] - d_s[lane]);
    }
    __syncwarp();
    for (int i = 0; i < kTile; ++i) {
      for (int e = 0; e < kColsK; ++e) {
        const float qv = qs[i * (DQK + 1) + lane + 32 * e];
        for (int r = 0; r < kRows; ++r) ak[r][e] += dss[(warp + 8 * r) * 33 + i] * qv;
      }
      for (int e = 0; e < kColsV; ++e) {
        const float dov = dos[i * (DV + 1) + lane + 32 * e];
        for (int r = 0; r < kRows; ++r) av[r][e] += ps[(warp + 8 * r) * 33 + i] * dov;
      }
    }
  }
  for (int r = 0; r < kRows; ++r) {
    const int t = k0 + warp + 8 * r;
    if (t >= T) continue;
    const int64_t row = row_index(b, t, h, T, H);
    for (int e = 0; e < kColsK; ++e) dk[row * DQK + lane + 32 * e] = scale * ak[r][e];
    for (int e = 0; e < kColsV; ++e) dv[row * DV + lane + 32 * e] = av[r][e];
  }
}

template <class Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int DQK, int DV>
void forward_impl(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
                  float* lse, cudaStream_t stream) {
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads);
  const dim3 grid((T + kTile - 1) / kTile, H, static_cast<unsigned>(s.batch));
  const size_t smem = sizeof(float) * (kTile * DQK + kTile * (DQK + 1) + kTile * DV + kTile * 33);
  set_smem(mla_fwd_kernel<DQK, DV>, smem);
  mla_fwd_kernel<DQK, DV><<<grid, kThreads, smem, stream>>>(T, H, q, k, v, scale, o, lse);
  MOESIM_LAUNCH_CHECK();
}

template <int DQK, int DV>
void backward_impl(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const bf16_bits* o,
                   const float* lse, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv, float* dsum,
                   cudaStream_t stream, AttentionImpl impl) {
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads);
  const int64_t rows = s.batch * s.seq * s.heads;
  mla_dot_kernel<DV><<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(T, H, rows, o, d_o, dsum);
  MOESIM_LAUNCH_CHECK();
  if (impl == AttentionImpl::tensor_core) {
    mla_tc::backward(s, q, k, v, lse, dsum, d_o, scale, dq, dk, dv, stream);
    return;
  }
  const dim3 grid((T + kTile - 1) / kTile, H, static_cast<unsigned>(s.batch));
  const size_t smem_dq = sizeof(float) * (kTile * DQK + kTile * DV + kTile * (DQK + 1) + kTile * (DV + 1) + kTile * 33);
  set_smem(mla_dq_kernel<DQK, DV>, smem_dq);
  mla_dq_kernel<DQK, DV><<<grid, kThreads, smem_dq, stream>>>(T, H, q, k, v, d_o, lse, dsum, scale, dq);
  MOESIM_LAUNCH_CHECK();
  const size_t smem_kv =
      sizeof(float) * (kTile * DQK + kTile * DV + kTile * (DQK + 1) + kTile * (DV + 1) + 2 * kTile * 33 + 2 * kTile);
  set_smem(mla_dkdv_kernel<DQK, DV>, smem_kv);
  mla_dkdv_kernel<DQK, DV><<<grid, kThreads, smem_kv, stream>>>(T, H, q, k, v, d_o, lse, dsum, scale, dk, dv);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace

void mla_check_shape(const MlaShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.heads < 1) throw std::invalid_argument("MLA: batch, seq and heads must be >= 1");
  const bool ok = (s.head_dim_qk == 192 || s.head_dim_qk == 128) && s.head_dim_v == 128;
  if (!ok) throw std::invalid_argument("MLA: supported (head_dim_qk, head_dim_v): (192, 128), (128, 128)");
  if (s.seq > (int64_t{1} << 30) || s.heads > 65535 || s.batch > 65535)
    throw std::invalid_argument("MLA: shape too large");
}

void mla_forward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
                 float* lse, cudaStream_t stream, AttentionImpl impl) {
  mla_check_shape(s);
  if (impl == AttentionImpl::tensor_core) {
    mla_tc::forward(s, q, k, v, scale, o, lse, stream);
  } else if (s.head_dim_qk == 192) {
    forward_impl<192, 128>(s, q, k, v, scale, o, lse, stream);
  } else {
    forward_impl<128, 128>(s, q, k, v, scale, o, lse, stream);
  }
}

size_t mla_backward_workspace_bytes(const MlaShape& s) {
  mla_check_shape(s);
  return static_cast<size_t>(s.batch * s.heads * s.seq) * sizeof(float);
}

void mla_backward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const bf16_bits* o,
                  const float* lse, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv, void* workspace,
                  cudaStream_t stream, AttentionImpl impl) {
  mla_check_shape(s);
  auto* dsum = static_cast<float*>(workspace);
  if (s.head_dim_qk == 192) {
    backward_impl<192, 128>(s, q, k, v, o, lse, d_o, scale, dq, dk, dv, dsum, stream, impl);
  } else {
    backward_impl<128, 128>(s, q, k, v, o, lse, d_o, scale, dq, dk, dv, dsum, stream, impl);
  }
}

KernelCost mla_forward_cost(const MlaShape& s) {
  const double pairs = static_cast<double>(s.batch) * causal_pairs(s.seq, s.seq);
  const double rows = static_cast<double>(s.batch * s.seq * s.heads);
  const double dqk = static_cast<double>(s.head_dim_qk), dv = static_cast<double>(s.head_dim_v);
  KernelCost c;
  c.flops = 2.0 * static_cast<double>(s.heads) * (dqk + dv) * pairs;
  c.bytes = rows * ((2 * dqk + dv) * 2 + dv * 2 + 4);  // q, k, v in; o, lse out
  return c;
}

KernelCost mla_backward_cost(const MlaShape& s) {
  const double rows = static_cast<double>(s.batch * s.seq * s.heads);
  const double dqk = static_cast<double>(s.head_dim_qk), dv = static_cast<double>(s.head_dim_v);
  KernelCost c;
  c.flops = 2 * mla_forward_cost(s).flops;
  // q, k, v, o, do (bf16) and lse in; dq, dk, dv (fp32) out.
  c.bytes = rows * ((2 * dqk + 3 * dv) * 2 + 4) + rows * (2 * dqk + dv) * 4;
  return c;
}

}  // namespace moesim::cuda
