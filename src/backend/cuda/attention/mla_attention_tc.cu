// SPDX-License-Identifier: MIT
// MLA causal attention on tensor cores (WMMA 16x16x16, BF16 operands, FP32 accumulators).
// Tiles of 64 queries x 64 keys in shared memory. The forward makes two passes over the keys,
// the first for the row max and sum (lse), the second for O = sum exp(S - lse) V: the output
// accumulators then never need a per-row rescale, whose fragment layout WMMA does not expose.
// That costs one extra Q K^T (192 of 320 FLOPs per pair), cheap next to the tensor-core gain.
// The backward is FlashAttention-2's: a query-major kernel for dQ, a key-major one for dK, dV,
// both recomputing P from lse; dS and P pass through BF16 for the GEMMs as there.
#include <mma.h>

#include <cmath>

#include "backend/cuda/attention/mla_attention_tc.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda::mla_tc {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBcol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragBrow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kB = 64;  // rows per tile (queries or keys)
// Shared-memory row strides padded by 16 bytes: unpadded rows of 128, 256 or 384 bytes put the
// 16 rows of a WMMA fragment in the same banks (8-way conflicts on every fragment load).
__host__ __device__ constexpr int pad(int dim) { return dim + 8; }  // BF16 tiles [64][pad(dim)]
constexpr int kLdP = kB + 8;                                        // BF16 P / dS tiles [64][kLdP]
constexpr int kLdS = kB + 4;                                        // FP32 S / dP tiles [64][kLdS]

__device__ __forceinline__ int64_t row_index(int b, int t, int h, int T, int H) {
  return (static_cast<int64_t>(b) * T + t) * H + h;
}

// Copies rows t0..t0+63 of a [B, T, H, Dim] BF16 tensor into a [64][Dim] tile (zeros past T),
// 16 bytes per access.
template <int Dim>
__device__ __forceinline__ void load_tile(bf16* dst, const bf16_bits* __restrict__ src, int b, int t0, int h, int T,
                                          int H) {
  constexpr int kVec = Dim / 8;
  auto* d4 = reinterpret_cast<uint4*>(dst);
  for (int e = threadIdx.x; e < kB * kVec; e += blockDim.x) {
    const int r = e / kVec, part = e % kVec, t = t0 + r;
    uint4 val = make_uint4(0, 0, 0, 0);
    if (t < T) val = reinterpret_cast<const uint4*>(src + row_index(b, t, h, T, H) * Dim)[part];
    d4[r * (pad(Dim) / 8) + part] = val;
  }
}

// C[16 x 16] at (rb, cb) of A[64][K] (row-major) times B^T where B is [64][K] row-major
// (i.e. col-major K x 64): scores Q K^T and the like.
template <int K>
__device__ __forceinline__ void mma_abt(FragC& c, const bf16* a, const bf16* b, int rb, int cb) {
  wmma::fill_fragment(c, 0.f);
  FragA fa;
  FragBcol fb;
  for (int kk = 0; kk < K / 16; ++kk) {
    wmma::load_matrix_sync(fa, a + rb * 16 * pad(K) + kk * 16, pad(K));
    wmma::load_matrix_sync(fb, b + cb * 16 * pad(K) + kk * 16, pad(K));
    wmma::mma_sync(c, fa, fb, c);
  }
}

// C[16 x 16] at (rb, cb) += A[64][64] (row-major) times B[64][N] (row-major).
template <int N>
__device__ __forceinline__ void mma_ab_acc(FragC& c, const bf16* a, const bf16* b, int rb, int cb) {
  FragA fa;
  FragBrow fb;
  for (int kk = 0; kk < kB / 16; ++kk) {
    wmma::load_matrix_sync(fa, a + rb * 16 * kLdP + kk * 16, kLdP);
    wmma::load_matrix_sync(fb, b + kk * 16 * pad(N) + cb * 16, pad(N));
    wmma::mma_sync(c, fa, fb, c);
  }
}

// Forward: block per (64 queries, head, batch), 4 warps, warp w owns query rows 16w..16w+15.
template <int DQK, int DV>
__global__ void __launch_bounds__(128)
    fwd_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
               const bf16_bits* __restrict__ v, float scale, bf16_bits* __restrict__ o, float* __restrict__ lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);              // [64][pad(DQK)]
  bf16* ks = qs + kB * pad(DQK);                         // [64][pad(DQK)]
  bf16* vs = ks + kB * pad(DQK);                         // [64][pad(DV)]
  bf16* pb = vs + kB * pad(DV);                          // [64][kLdP] P
  float* ss = reinterpret_cast<float*>(pb + kB * kLdP);  // [64][kLdS] S
  const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * kB;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int row = warp * 16 + lane / 2, half = lane % 2;  // two lanes per row for the softmax
  load_tile<DQK>(qs, q, b, q0, h, T, H);
  const int num_kt = min(T - 1, q0 + kB - 1) / kB + 1;

  float m = -INFINITY, l = 0.f;
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * kB;
    __syncthreads();
    load_tile<DQK>(ks, k, b, k0, h, T, H);
    __syncthreads();
    for (int cb = 0; cb < 4; ++cb) {
      FragC c;
      mma_abt<DQK>(c, qs, ks, warp, cb);
      wmma::store_matrix_sync(ss + warp * 16 * kLdS + cb * 16, c, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    float mx = -INFINITY;
    for (int jj = 0; jj < 32; ++jj) {
      const int j = half * 32 + jj, key = k0 + j;
      if (key <= q0 + row && key < T) mx = fmaxf(mx, ss[row * kLdS + j] * scale);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    const float mnew = fmaxf(m, mx);  // finite: key 0 is valid for every row
    float sum = 0.f;
    for (int jj = 0; jj < 32; ++jj) {
      const int j = half * 32 + jj, key = k0 + j;
      if (key <= q0 + row && key < T) sum += __expf(ss[row * kLdS + j] * scale - mnew);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l = l * __expf(m - mnew) + sum;
    m = mnew;
  }
  const float row_lse = m + logf(l);

  FragC acc[DV / 16];
  for (auto& a : acc) wmma::fill_fragment(a, 0.f);
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * kB;
    __syncthreads();
    load_tile<DQK>(ks, k, b, k0, h, T, H);
    load_tile<DV>(vs, v, b, k0, h, T, H);
    __syncthreads();
    for (int cb = 0; cb < 4; ++cb) {
      FragC c;
      mma_abt<DQK>(c, qs, ks, warp, cb);
      wmma::store_matrix_sync(ss + warp * 16 * kLdS + cb * 16, c, kLdS, wmma::mem_row_major);
    }
    __syncwarp();
    for (int jj = 0; jj < 32; ++jj) {
      const int j = half * 32 + jj, key = k0 + j;
      const bool valid = key <= q0 + row && key < T;
      pb[row * kLdP + j] = __float2bfloat16_rn(valid ? __expf(ss[row * kLdS + j] * scale - row_lse) : 0.f);
    }
    __syncwarp();
    for (int cb = 0; cb < DV / 16; ++cb) mma_ab_acc<DV>(acc[cb], pb, vs, warp, cb);
  }
  __syncthreads();  // ks/vs become the FP32 output stage [64][DV]
  float* os = reinterpret_cast<float*>(ks);
  for (int cb = 0; cb < DV / 16; ++cb) {
    wmma::store_matrix_sync(os + warp * 16 * DV + cb * 16, acc[cb], DV, wmma::mem_row_major);
  }
  __syncwarp();
  for (int e = lane; e < 16 * DV; e += 32) {
    const int r = warp * 16 + e / DV, c = e % DV, t = q0 + r;
    if (t < T) o[row_index(b, t, h, T, H) * DV + c] = detail::to_bf(os[r * DV + c]);
  }
  if (half == 0 && q0 + row < T) lse[(static_cast<int64_t>(b) * H + h) * T + q0 + row] = row_lse;
}

// dQ = scale sum_j dS_ij K_j: block per (64 queries, head, batch), 8 warps.
template <int DQK, int DV>
__global__ void __launch_bounds__(256)
    dq_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
              const bf16_bits* __restrict__ v, const bf16_bits* __restrict__ d_o, const float* __restrict__ lse,
              const float* __restrict__ dsum, float scale, float* __restrict__ dq) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);                 // [64][pad(DQK)]
  bf16* dos = qs + kB * pad(DQK);                           // [64][pad(DV)]
  bf16* ks = dos + kB * pad(DV);                            // [64][pad(DQK)]
  bf16* vs = ks + kB * pad(DQK);                            // [64][pad(DV)]
  float* ss = reinterpret_cast<float*>(vs + kB * pad(DV));  // [64][kLdS] S
  float* dps = ss + kB * kLdS;                              // [64][kLdS] dP
  bf16* dsb = reinterpret_cast<bf16*>(dps + kB * kLdS);     // [64][kLdP] dS
  float* lse_s = reinterpret_cast<float*>(dsb + kB * kLdP);
  float* d_s = lse_s + kB;
  const int h = blockIdx.y, b = blockIdx.z, q0 = blockIdx.x * kB;
  const int warp = threadIdx.x / 32;
  load_tile<DQK>(qs, q, b, q0, h, T, H);
  load_tile<DV>(dos, d_o, b, q0, h, T, H);
  if (threadIdx.x < kB) {
    const int t = min(q0 + static_cast<int>(threadIdx.x), T - 1);
    lse_s[threadIdx.x] = lse[(static_cast<int64_t>(b) * H + h) * T + t];
    d_s[threadIdx.x] = dsum[(static_cast<int64_t>(b) * H + h) * T + t];
  }
  constexpr int kColsPerWarp = DQK / 16 / 2;
  const int rb = warp / 2, cb0 = (warp % 2) * kColsPerWarp;
  FragC acc[kColsPerWarp];
  for (auto& a : acc) wmma::fill_fragment(a, 0.f);
  const int num_kt = min(T - 1, q0 + kB - 1) / kB + 1;
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * kB;
    __syncthreads();
    load_tile<DQK>(ks, k, b, k0, h, T, H);
    load_tile<DV>(vs, v, b, k0, h, T, H);
    __syncthreads();
    for (int n = 0; n < 2; ++n) {
      const int cb = (warp % 2) * 2 + n;
      FragC c;
      mma_abt<DQK>(c, qs, ks, rb, cb);
      wmma::store_matrix_sync(ss + rb * 16 * kLdS + cb * 16, c, kLdS, wmma::mem_row_major);
      mma_abt<DV>(c, dos, vs, rb, cb);
      wmma::store_matrix_sync(dps + rb * 16 * kLdS + cb * 16, c, kLdS, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kB * kB; e += 256) {
      const int i = e / kB, j = e % kB, key = k0 + j, t = q0 + i;
      const bool valid = key <= t && key < T && t < T;
      const float p = valid ? __expf(ss[i * kLdS + j] * scale - lse_s[i]) : 0.f;
      dsb[i * kLdP + j] = __float2bfloat16_rn(p * (dps[i * kLdS + j] - d_s[i]));
    }
    __syncthreads();
    for (int n = 0; n < kColsPerWarp; ++n) mma_ab_acc<DQK>(acc[n], dsb, ks, rb, cb0 + n);
  }
  __syncthreads();  // ks.. become the FP32 stage [64][DQK]
  float* st = reinterpret_cast<float*>(ks);
  for (int n = 0; n < kColsPerWarp; ++n) {
    wmma::store_matrix_sync(st + rb * 16 * DQK + (cb0 + n) * 16, acc[n], DQK, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kB * DQK; e += 256) {
    const int r = e / DQK, c = e % DQK, t = q0 + r;
    if (t < T) dq[row_index(b, t, h, T, H) * DQK + c] = scale * st[e];
  }
}

// dV = sum_i P_ij dO_i, dK = scale sum_i dS_ij Q_i: block per (64 keys, head, batch), 8 warps,
// query tiles from the diagonal on.
template <int DQK, int DV>
__global__ void __launch_bounds__(256)
    dkdv_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                const bf16_bits* __restrict__ v, const bf16_bits* __restrict__ d_o, const float* __restrict__ lse,
                const float* __restrict__ dsum, float scale, float* __restrict__ dk, float* __restrict__ dv) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);                  // [64][pad(DQK)]
  bf16* vs = ks + kB * pad(DQK);                             // [64][pad(DV)]
  bf16* qs = vs + kB * pad(DV);                              // [64][pad(DQK)]
  bf16* dos = qs + kB * pad(DQK);                            // [64][pad(DV)]
  float* st = reinterpret_cast<float*>(dos + kB * pad(DV));  // [64 keys][64 queries] S^T
  float* dpt = st + kB * kLdS;                               // dP^T
  bf16* pb = reinterpret_cast<bf16*>(dpt + kB * kLdS);       // P^T
  bf16* dsb = pb + kB * kLdP;                                // dS^T
  float* lse_s = reinterpret_cast<float*>(dsb + kB * kLdP);
  float* d_s = lse_s + kB;
  const int h = blockIdx.y, b = blockIdx.z, k0 = blockIdx.x * kB;
  const int warp = threadIdx.x / 32;
  load_tile<DQK>(ks, k, b, k0, h, T, H);
  load_tile<DV>(vs, v, b, k0, h, T, H);
  constexpr int kColsK = DQK / 16 / 2, kColsV = DV / 16 / 2;
  const int rb = warp / 2;
  FragC ak[kColsK], av[kColsV];
  for (auto& a : ak) wmma::fill_fragment(a, 0.f);
  for (auto& a : av) wmma::fill_fragment(a, 0.f);
  const int num_qt = (T + kB - 1) / kB;
  for (int qt = blockIdx.x; qt < num_qt; ++qt) {
    const int q0 = qt * kB;
    __syncthreads();
    load_tile<DQK>(qs, q, b, q0, h, T, H);
    load_tile<DV>(dos, d_o, b, q0, h, T, H);
    if (threadIdx.x < kB) {
      const int t = min(q0 + static_cast<int>(threadIdx.x), T - 1);
      lse_s[threadIdx.x] = lse[(static_cast<int64_t>(b) * H + h) * T + t];
      d_s[threadIdx.x] = dsum[(static_cast<int64_t>(b) * H + h) * T + t];
    }
    __syncthreads();
    for (int n = 0; n < 2; ++n) {
      const int cb = (warp % 2) * 2 + n;
      FragC c;
      mma_abt<DQK>(c, ks, qs, rb, cb);
      wmma::store_matrix_sync(st + rb * 16 * kLdS + cb * 16, c, kLdS, wmma::mem_row_major);
      mma_abt<DV>(c, vs, dos, rb, cb);
      wmma::store_matrix_sync(dpt + rb * 16 * kLdS + cb * 16, c, kLdS, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kB * kB; e += 256) {
      const int j = e / kB, i = e % kB, key = k0 + j, t = q0 + i;
      const bool valid = key <= t && key < T && t < T;
      const float p = valid ? __expf(st[j * kLdS + i] * scale - lse_s[i]) : 0.f;
      pb[j * kLdP + i] = __float2bfloat16_rn(p);
      dsb[j * kLdP + i] = __float2bfloat16_rn(p * (dpt[j * kLdS + i] - d_s[i]));
    }
    __syncthreads();
    for (int n = 0; n < kColsK; ++n) mma_ab_acc<DQK>(ak[n], dsb, qs, rb, (warp % 2) * kColsK + n);
    for (int n = 0; n < kColsV; ++n) mma_ab_acc<DV>(av[n], pb, dos, rb, (warp % 2) * kColsV + n);
  }
  __syncthreads();  // the tiles become FP32 stages: dK [64][DQK], then dV [64][DV]
  float* stage = reinterpret_cast<float*>(smem);
  for (int n = 0; n < kColsK; ++n) {
    wmma::store_matrix_sync(stage + rb * 16 * DQK + ((warp % 2) * kColsK + n) * 16, ak[n], DQK, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kB * DQK; e += 256) {
    const int r = e / DQK, c = e % DQK, t = k0 + r;
    if (t < T) dk[row_index(b, t, h, T, H) * DQK + c] = scale * stage[e];
  }
  __syncthreads();
  for (int n = 0; n < kColsV; ++n) {
    wmma::store_matrix_sync(stage + rb * 16 * DV + ((warp % 2) * kColsV + n) * 16, av[n], DV, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kB * DV; e += 256) {
    const int r = e / DV, c = e % DV, t = k0 + r;
    if (t < T) dv[row_index(b, t, h, T, H) * DV + c] = stage[e];
  }
}

template <class Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

template <int DQK, int DV>
void forward_t(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
               float* lse, cudaStream_t stream) {
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads);
  const size_t smem = 2 * (2 * kB * pad(DQK) + kB * pad(DV) + kB * kLdP) + 4 * kB * kLdS;
  static_assert(2 * (kB * pad(DQK) + kB * pad(DV)) >= 4 * kB * DV, "the output stage reuses the K and V tiles");
  set_smem(fwd_kernel<DQK, DV>, smem);
  fwd_kernel<DQK, DV>
      <<<dim3((T + kB - 1) / kB, H, static_cast<unsigned>(s.batch)), 128, smem, stream>>>(T, H, q, k, v, scale, o, lse);
  MOESIM_LAUNCH_CHECK();
}

template <int DQK, int DV>
void backward_t(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* lse,
                const float* dsum, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv,
                cudaStream_t stream) {
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads);
  const dim3 grid((T + kB - 1) / kB, H, static_cast<unsigned>(s.batch));
  const size_t smem_q = 2 * (2 * kB * pad(DQK) + 2 * kB * pad(DV) + kB * kLdP) + 4 * (2 * kB * kLdS + 2 * kB);
  static_assert(2 * (kB * pad(DQK) + kB * pad(DV)) + 4 * 2 * kB * kLdS >= 4 * kB * DQK,
                "the dQ stage reuses K, V, S, dP");
  set_smem(dq_kernel<DQK, DV>, smem_q);
  dq_kernel<DQK, DV><<<grid, 256, smem_q, stream>>>(T, H, q, k, v, d_o, lse, dsum, scale, dq);
  MOESIM_LAUNCH_CHECK();
  const size_t smem_kv = 2 * (2 * kB * pad(DQK) + 2 * kB * pad(DV) + 2 * kB * kLdP) + 4 * (2 * kB * kLdS + 2 * kB);
  static_assert(2 * (2 * kB * pad(DQK) + 2 * kB * pad(DV)) >= 4 * kB * DQK, "the dK stage reuses the tiles");
  set_smem(dkdv_kernel<DQK, DV>, smem_kv);
  dkdv_kernel<DQK, DV><<<grid, 256, smem_kv, stream>>>(T, H, q, k, v, d_o, lse, dsum, scale, dk, dv);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace

void forward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
             float* lse, cudaStream_t stream) {
  if (s.head_dim_qk == 192) {
    forward_t<192, 128>(s, q, k, v, scale, o, lse, stream);
  } else {
    forward_t<128, 128>(s, q, k, v, scale, o, lse, stream);
  }
}

void backward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* lse,
              const float* dsum, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv,
              cudaStream_t stream) {
  if (s.head_dim_qk == 192) {
    backward_t<192, 128>(s, q, k, v, lse, dsum, d_o, scale, dq, dk, dv, stream);
  } else {
    backward_t<128, 128>(s, q, k, v, lse, dsum, d_o, scale, dq, dk, dv, stream);
  }
}

}  // namespace moesim::cuda::mla_tc
