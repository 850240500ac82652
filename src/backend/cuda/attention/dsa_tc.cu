// SPDX-License-Identifier: MIT
// The DSA lightning indexer and its gradient on tensor cores (WMMA 16x16x16, BF16 operands, FP32
// accumulators). The sparse attention's tensor-core kernels are in dsa_mma.cu.
#include <mma.h>

#include <cmath>

#include "backend/cuda/attention/dsa_tc.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda::dsa_tc {
namespace {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragBcol = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;
using FragBrow = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kThreads = 256;
// Shared-memory rows padded by 16 bytes: rows of a power-of-two size would put the 16 rows of a
// WMMA fragment in the same banks.
constexpr int kLs = 64 + 4, kLp = 64 + 8;  // FP32 S, BF16 P tiles of 64 columns

// c = A[16 x K] B[16 x K]^T, both row-major with leading dims lda, ldb (pointers at row 0).
template <int K>
__device__ __forceinline__ void mma_abt(FragC& c, const bf16* a, int lda, const bf16* b, int ldb) {
  wmma::fill_fragment(c, 0.f);
  FragA fa;
  FragBcol fb;
  for (int kk = 0; kk < K / 16; ++kk) {
    wmma::load_matrix_sync(fa, a + kk * 16, lda);
    wmma::load_matrix_sync(fb, b + kk * 16, ldb);
    wmma::mma_sync(c, fa, fb, c);
  }
}

// c += A[16 x K] B[K x 16], both row-major.
template <int K>
__device__ __forceinline__ void mma_ab_acc(FragC& c, const bf16* a, int lda, const bf16* b, int ldb) {
  FragA fa;
  FragBrow fb;
  for (int kk = 0; kk < K / 16; ++kk) {
    wmma::load_matrix_sync(fa, a + kk * 16, lda);
    wmma::load_matrix_sync(fb, b + kk * 16 * ldb, ldb);
    wmma::mma_sync(c, fa, fb, c);
  }
}

// Lightning indexer scores: block per (64 keys, 64 queries, batch), 8 warps, tiles above the
// diagonal skipped. Per head: S = Q_h K^T on tensor cores (two 16 x 16 fragments per warp), then
// I += w_h ReLU(S) elementwise, 16 entries per thread.
__global__ void __launch_bounds__(kThreads)
    indexer_kernel(int T, int Hi, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                   const float* __restrict__ w, float* __restrict__ scores) {
  constexpr int kDi = 128, kLi = kDi + 8, kT = 64;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);             // [64 keys][kLi]
  bf16* qs = ks + kT * kLi;                             // [64 queries][kLi]
  float* ss = reinterpret_cast<float*>(qs + kT * kLi);  // [64][kLs]
  float* wsm = ss + kT * kLs;                           // [64 queries][Hi]
  const int k0 = blockIdx.x * kT, q0 = blockIdx.y * kT, b = blockIdx.z;
  if (k0 > q0 + kT - 1) return;
  const int warp = threadIdx.x / 32;
  for (int e = threadIdx.x; e < kT * (kDi / 8); e += kThreads) {
    const int r = e / (kDi / 8), part = e % (kDi / 8), t = k0 + r;
    reinterpret_cast<uint4*>(ks + r * kLi)[part] =
        t < T ? reinterpret_cast<const uint4*>(k + (static_cast<int64_t>(b) * T + t) * kDi)[part]
              : make_uint4(0, 0, 0, 0);
  }
  for (int e = threadIdx.x; e < kT * Hi; e += kThreads) {
    const int i = e / Hi, t = q0 + i;
    wsm[e] = t < T ? w[(static_cast<int64_t>(b) * T + t) * Hi + e % Hi] : 0.f;
  }
  float acc[kT * kT / kThreads] = {};
  for (int hh = 0; hh < Hi; ++hh) {
    __syncthreads();
    for (int e = threadIdx.x; e < kT * (kDi / 8); e += kThreads) {
      const int r = e / (kDi / 8), part = e % (kDi / 8), t = q0 + r;
      reinterpret_cast<uint4*>(qs + r * kLi)[part] =
          t < T ? reinterpret_cast<const uint4*>(q + ((static_cast<int64_t>(b) * T + t) * Hi + hh) * kDi)[part]
                : make_uint4(0, 0, 0, 0);
    }
    __syncthreads();
    for (int n = 0; n < 2; ++n) {
      const int f = warp * 2 + n, rb = f / 4, cb = f % 4;
      FragC c;
      mma_abt<kDi>(c, qs + rb * 16 * kLi, kLi, ks + cb * 16 * kLi, kLi);
      wmma::store_matrix_sync(ss + rb * 16 * kLs + cb * 16, c, kLs, wmma::mem_row_major);
    }
    __syncthreads();
    for (int r = 0; r < kT * kT / kThreads; ++r) {
      const int e = threadIdx.x + r * kThreads, i = e / kT, j = e % kT;
      acc[r] += wsm[i * Hi + hh] * fmaxf(ss[i * kLs + j], 0.f);
    }
  }
  for (int r = 0; r < kT * kT / kThreads; ++r) {
    const int e = threadIdx.x + r * kThreads, i = e / kT, j = e % kT, t = q0 + i, x = k0 + j;
    if (t < T && x <= t) scores[(static_cast<int64_t>(b) * T + t) * T + x] = acc[r];
  }
}

// Splits x into two BF16 terms, hi + lo == x to ~2^-17 relative: the indexer's gradient weights
// (dI, times w) are FP32 inputs, and one BF16 operand would lose 8 bits of them.
__device__ __forceinline__ void split_bf16(float x, bf16* hi, bf16* lo) {
  const bf16 h = __float2bfloat16_rn(x);
  *hi = h;
  *lo = __float2bfloat16_rn(x - __bfloat162float(h));
}

constexpr int kIdxDi = 128, kIdxLd = kIdxDi + 8, kIdxT = 64;

// Copies rows t0..t0+63 of a BF16 tensor with rows of 128 (row r at src + row(t) * 128) into
// [64][kIdxLd]; zeros past T.
template <class RowOf>
__device__ __forceinline__ void load_idx_tile(bf16* dst, const bf16_bits* __restrict__ src, int t0, int T, RowOf row) {
  for (int e = threadIdx.x; e < kIdxT * (kIdxDi / 8); e += kThreads) {
    const int r = e / (kIdxDi / 8), part = e % (kIdxDi / 8), t = t0 + r;
    reinterpret_cast<uint4*>(dst + r * kIdxLd)[part] =
        t < T ? reinterpret_cast<const uint4*>(src + row(t) * kIdxDi)[part] : make_uint4(0, 0, 0, 0);
  }
}

// dq(t, h) = w(t, h) sum_s dI(t, s) [S > 0] k(s) and dw(t, h) = sum_s dI(t, s) ReLU(S): block per
// (64 queries, head, batch), key tiles up to the diagonal. Warp w owns dq fragments (w / 2,
// (w % 2) * 4 .. + 3).
__global__ void __launch_bounds__(kThreads)
    indexer_dq_kernel(int T, int Hi, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                      const float* __restrict__ w, const float* __restrict__ d_scores, float* __restrict__ dq,
                      float* __restrict__ dw) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* qs = reinterpret_cast<bf16*>(smem);                    // [64][kIdxLd]
  bf16* ks = qs + kIdxT * kIdxLd;                              // [64][kIdxLd]
  float* ss = reinterpret_cast<float*>(ks + kIdxT * kIdxLd);   // [64][kLs]
  bf16* g_hi = reinterpret_cast<bf16*>(ss + kIdxT * kLs);      // [64][kLp]
  bf16* g_lo = g_hi + kIdxT * kLp;                             // [64][kLp]
  float* dw_s = reinterpret_cast<float*>(g_lo + kIdxT * kLp);  // [64]
  const int q0 = blockIdx.x * kIdxT, hh = blockIdx.y, b = blockIdx.z;
  const int warp = threadIdx.x / 32, rb = warp / 2;
  load_idx_tile(qs, q, q0, T, [&](int t) { return (static_cast<int64_t>(b) * T + t) * Hi + hh; });
  if (threadIdx.x < kIdxT) dw_s[threadIdx.x] = 0.f;
  FragC acc[4];
  for (auto& a : acc) wmma::fill_fragment(a, 0.f);
  const int num_kt = min(T - 1, q0 + kIdxT - 1) / kIdxT + 1;
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * kIdxT;
    __syncthreads();
    load_idx_tile(ks, k, k0, T, [&](int t) { return static_cast<int64_t>(b) * T + t; });
    __syncthreads();
    for (int n = 0; n < 2; ++n) {
      const int f = warp * 2 + n, fr = f / 4, fc = f % 4;
      FragC c;
      mma_abt<kIdxDi>(c, qs + fr * 16 * kIdxLd, kIdxLd, ks + fc * 16 * kIdxLd, kIdxLd);
      wmma::store_matrix_sync(ss + fr * 16 * kLs + fc * 16, c, kLs, wmma::mem_row_major);
    }
    __syncthreads();
    for (int e = threadIdx.x; e < kIdxT * kIdxT; e += kThreads) {
      const int i = e / kIdxT, j = e % kIdxT, t = q0 + i, x = k0 + j;
      const float gsc = (t < T && x <= t) ? d_scores[(static_cast<int64_t>(b) * T + t) * T + x] : 0.f;
      const float sv = ss[i * kLs + j];
      if (sv > 0.f && gsc != 0.f) atomicAdd(&dw_s[i], gsc * sv);
      split_bf16(sv > 0.f ? gsc : 0.f, &g_hi[i * kLp + j], &g_lo[i * kLp + j]);
    }
    __syncthreads();
    for (int n = 0; n < 4; ++n) {
      const int cb = (warp % 2) * 4 + n;
      mma_ab_acc<kIdxT>(acc[n], g_hi + rb * 16 * kLp, kLp, ks + cb * 16, kIdxLd);
      mma_ab_acc<kIdxT>(acc[n], g_lo + rb * 16 * kLp, kLp, ks + cb * 16, kIdxLd);
    }
  }
  __syncthreads();  // qs, ks, ss become the FP32 stage [64][128]
  float* st = reinterpret_cast<float*>(smem);
  for (int n = 0; n < 4; ++n) {
    wmma::store_matrix_sync(st + rb * 16 * kIdxDi + ((warp % 2) * 4 + n) * 16, acc[n], kIdxDi, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kIdxT * kIdxDi; e += kThreads) {
    const int i = e / kIdxDi, c = e % kIdxDi, t = q0 + i;
    if (t >= T) continue;
    const int64_t row = (static_cast<int64_t>(b) * T + t) * Hi + hh;
    dq[row * kIdxDi + c] = w[row] * st[e];
    if (c == 0) dw[row] = dw_s[i];
  }
}

// dk(s) += sum_{t >= s} sum_h dI(t, s) w(t, h) [S > 0] q(t, h): block per (64 keys, group of 8
// heads, batch), query tiles from the diagonal on; the group's sum is added to dk with atomics.
__global__ void __launch_bounds__(kThreads)
    indexer_dk_kernel(int T, int Hi, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                      const float* __restrict__ w, const float* __restrict__ d_scores, float* __restrict__ dk) {
  constexpr int kGroup = 8;
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* ks = reinterpret_cast<bf16*>(smem);                   // [64 keys][kIdxLd]
  bf16* qs = ks + kIdxT * kIdxLd;                             // [64 queries][kIdxLd]
  float* st = reinterpret_cast<float*>(qs + kIdxT * kIdxLd);  // [64 keys][kLs] S^T
  float* dit = st + kIdxT * kLs;                              // [64 keys][kLs] dI^T
  bf16* a_hi = reinterpret_cast<bf16*>(dit + kIdxT * kLs);    // [64 keys][kLp]
  bf16* a_lo = a_hi + kIdxT * kLp;                            // [64 keys][kLp]
  float* wsm = reinterpret_cast<float*>(a_lo + kIdxT * kLp);  // [64 queries]
  const int k0 = blockIdx.x * kIdxT, h0 = blockIdx.y * kGroup, b = blockIdx.z;
  const int warp = threadIdx.x / 32, rb = warp / 2;
  load_idx_tile(ks, k, k0, T, [&](int t) { return static_cast<int64_t>(b) * T + t; });
  FragC acc[4];
  for (auto& a : acc) wmma::fill_fragment(a, 0.f);
  const int num_qt = (T + kIdxT - 1) / kIdxT;
  for (int qt = blockIdx.x; qt < num_qt; ++qt) {
    const int q0 = qt * kIdxT;
    __syncthreads();
    for (int e = threadIdx.x; e < kIdxT * kIdxT; e += kThreads) {
      const int i = e / kIdxT, j = e % kIdxT, t = q0 + i, x = k0 + j;  // coalesced over keys
      dit[j * kLs + i] = (t < T && x <= t) ? d_scores[(static_cast<int64_t>(b) * T + t) * T + x] : 0.f;
    }
    for (int hh = h0; hh < min(Hi, h0 + kGroup); ++hh) {
      __syncthreads();
      load_idx_tile(qs, q, q0, T, [&](int t) { return (static_cast<int64_t>(b) * T + t) * Hi + hh; });
      if (threadIdx.x < kIdxT) {
        const int t = q0 + static_cast<int>(threadIdx.x);
        wsm[threadIdx.x] = t < T ? w[(static_cast<int64_t>(b) * T + t) * Hi + hh] : 0.f;
      }
      __syncthreads();
      for (int n = 0; n < 2; ++n) {
        const int f = warp * 2 + n, fr = f / 4, fc = f % 4;
        FragC c;
        mma_abt<kIdxDi>(c, ks + fr * 16 * kIdxLd, kIdxLd, qs + fc * 16 * kIdxLd, kIdxLd);
        wmma::store_matrix_sync(st + fr * 16 * kLs + fc * 16, c, kLs, wmma::mem_row_major);
      }
      __syncthreads();
      for (int e = threadIdx.x; e < kIdxT * kIdxT; e += kThreads) {
        const int j = e / kIdxT, i = e % kIdxT;
        const float a = st[j * kLs + i] > 0.f ? dit[j * kLs + i] * wsm[i] : 0.f;
        split_bf16(a, &a_hi[j * kLp + i], &a_lo[j * kLp + i]);
      }
      __syncthreads();
      for (int n = 0; n < 4; ++n) {
        const int cb = (warp % 2) * 4 + n;
        mma_ab_acc<kIdxT>(acc[n], a_hi + rb * 16 * kLp, kLp, qs + cb * 16, kIdxLd);
        mma_ab_acc<kIdxT>(acc[n], a_lo + rb * 16 * kLp, kLp, qs + cb * 16, kIdxLd);
      }
    }
  }
  __syncthreads();  // ks, qs, st become the FP32 stage [64][128]
  float* stage = reinterpret_cast<float*>(smem);
  for (int n = 0; n < 4; ++n) {
    wmma::store_matrix_sync(stage + rb * 16 * kIdxDi + ((warp % 2) * 4 + n) * 16, acc[n], kIdxDi, wmma::mem_row_major);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kIdxT * kIdxDi; e += kThreads) {
    const int r = e / kIdxDi, t = k0 + r;
    if (t < T) atomicAdd(&dk[(static_cast<int64_t>(b) * T + t) * kIdxDi + e % kIdxDi], stage[e]);
  }
}

template <class Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

void indexer_scores(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w, float* scores,
                    cudaStream_t stream) {
  const int T = static_cast<int>(s.seq), Hi = static_cast<int>(s.heads);
  const size_t smem = 2 * 2 * 64 * (128 + 8) + 4 * 64 * kLs + 4 * 64 * static_cast<size_t>(Hi);
  set_smem(indexer_kernel, smem);
  const dim3 grid((T + 63) / 64, (T + 63) / 64, static_cast<unsigned>(s.batch));
  indexer_kernel<<<grid, kThreads, smem, stream>>>(T, Hi, q, k, w, scores);
  MOESIM_LAUNCH_CHECK();
}

void indexer_backward(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w,
                      const float* d_scores, float* dq, float* dk, float* dw, cudaStream_t stream) {
  const int T = static_cast<int>(s.seq), Hi = static_cast<int>(s.heads);
  const size_t smem_q = 2 * 2 * kIdxT * kIdxLd + 4 * kIdxT * kLs + 2 * 2 * kIdxT * kLp + 4 * kIdxT;
  static_assert(2 * 2 * kIdxT * kIdxLd + 4 * kIdxT * kLs >= 4 * kIdxT * kIdxDi, "the dq stage reuses qs, ks, ss");
  set_smem(indexer_dq_kernel, smem_q);
  indexer_dq_kernel<<<dim3((T + kIdxT - 1) / kIdxT, Hi, static_cast<unsigned>(s.batch)), kThreads, smem_q, stream>>>(
      T, Hi, q, k, w, d_scores, dq, dw);
  MOESIM_LAUNCH_CHECK();
  MOESIM_CUDA_CHECK(cudaMemsetAsync(dk, 0, static_cast<size_t>(s.batch * s.seq * kIdxDi) * sizeof(float), stream));
  const size_t smem_k = 2 * 2 * kIdxT * kIdxLd + 4 * 2 * kIdxT * kLs + 2 * 2 * kIdxT * kLp + 4 * kIdxT;
  set_smem(indexer_dk_kernel, smem_k);
  indexer_dk_kernel<<<dim3((T + kIdxT - 1) / kIdxT, (Hi + 7) / 8, static_cast<unsigned>(s.batch)), kThreads, smem_k,
                      stream>>>(T, Hi, q, k, w, d_scores, dk);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda::dsa_tc
