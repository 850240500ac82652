// SPDX-License-Identifier: MIT
// Internals shared by kda.cu (forward) and kda_backward.cu: tile sizes, the per-chunk workspace
// the preparation kernel writes, WMMA helpers (BF16 16x16x16, FP32 accumulators) and the two
// kernels both passes launch. See kda.hpp for the algorithm.
#pragma once

#include <mma.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda::kda_detail {

namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;
using Row = wmma::row_major;
using Col = wmma::col_major;
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kDk = 128;       // key/query head dim
constexpr int kC = 64;         // chunk length
constexpr int kSub = 16;       // sub-chunk: the reference row of the decay factorisation (below)
constexpr int kThreads = 256;  // every kernel: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kSlice = 32;  // value columns per block of the sequential (state) kernels

// Shared-memory row strides padded by 16 bytes so the 16 rows of a WMMA
// fragment fall in different banks; each keeps 16-row tile starts 32-byte aligned.
constexpr int kLdK = kDk + 8;      // BF16 [.][128] (also [.][dv] tiles, dv <= 128)
constexpr int kLdC = kC + 8;       // BF16 [.][64]
constexpr int kLdS = kSlice + 8;   // BF16 [.][32]
constexpr int kLdKf = kDk + 4;     // FP32 [.][128]
constexpr int kLdSf = kSlice + 4;  // FP32 [.][32]
constexpr int kLdCf = kC + 4;      // FP32 [.][64]

// What the preparation kernel writes per chunk. Row r = (bh * num_chunks + n) * kC + i (chunk n of
// head bh, position i); positions past T are identity steps (q = k = v = 0, g = 0, beta = 0).
struct ChunkWs {
  bf16_bits* w;    // [rows][dk] W = T (beta exp(G) k)
  bf16_bits* gq;   // [rows][dk] scale q exp(G)
  bf16_bits* kg;   // [rows][dk] k exp(G_last - G)
  bf16_bits* aqk;  // [rows][C]  Aqk (j <= i); the backward overwrites it with dAqk
  bf16_bits* tm;   // [rows][C]  T = (I + Diag(beta) Akk)^-1; the backward overwrites it with dAkk
  float* u;        // [rows][dv] U = T (beta v) (FP32: D = U - W S cancels); the backward's state pass
                   // overwrites it with D
  float* lam;      // [bh * num_chunks][dk] exp(G_last)
};

inline int64_t num_chunks(const KdaShape& s) { return (s.seq + kC - 1) / kC; }
size_t chunk_ws_bytes(const KdaShape& s);
ChunkWs split_chunk_ws(const KdaShape& s, void* ws);

// Preparation, parallel over chunks: fills every ChunkWs array.
void launch_prep(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                 const float* beta, float scale, const ChunkWs& ws, cudaStream_t stream);
// The state across chunks, sequential over chunks per (32 value columns, head, batch). With o:
// writes the output. With states: writes the state entering each chunk (BF16, [bh * nc][dk][dv])
// and D over U.
void launch_state(const KdaShape& s, const ChunkWs& ws, bf16_bits* o, bf16_bits* states, cudaStream_t stream);

__device__ __forceinline__ float as_f(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ bf16 as_bf(float x) { return __float2bfloat16_rn(x); }

// acc += A[tile row tm, k in [k0, k1)] B[k in [k0, k1), tile column tn] (k0, k1 multiples of 16)
// for shared-memory views A (M x K) and B (K x N): Row puts element (r, c) at p[r * ld + c], Col at
// p[c * ld + r] (a transposed operand is the Col view of the stored matrix).
template <class LA, class LB>
__device__ __forceinline__ void mma_range(FragC& acc, const bf16* a, int lda, const bf16* bm, int ldb, int tm,
                                          int tn, int k0, int k1) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LB> fb;
  for (int k = k0; k < k1; k += 16) {
    const bf16* pa = std::is_same_v<LA, Row> ? a + tm * 16 * lda + k : a + k * lda + tm * 16;
    const bf16* pb = std::is_same_v<LB, Row> ? bm + k * ldb + tn * 16 : bm + tn * 16 * ldb + k;
    wmma::load_matrix_sync(fa, pa, lda);
    wmma::load_matrix_sync(fb, pb, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// The state update both passes end a chunk with, over a block's [dk][kSlice] slice: each warp
// takes 16x16 tiles of the FP32 state sf, scales them by the chunk's decay (S <- Diag(lam) S, lam
// exp(G_last) per key row), adds `products(acc, tile_row, tile_col)` (the pass's tile products),
// and refreshes the BF16 copy sb the next chunk's products read.
template <class Products>
__device__ __forceinline__ void decay_and_add(float* sf, bf16* sb, const float* lam, int warp, int lane,
                                              Products&& products) {
  constexpr int kTileCols = kSlice / 16;
  for (int job = warp; job < (kDk / 16) * kTileCols; job += kWarps) {
    const int sm = job / kTileCols, sn = job % kTileCols;
    float* st = sf + sm * 16 * kLdSf + sn * 16;
    for (int e = lane; e < 256; e += 32) st[(e / 16) * kLdSf + e % 16] *= lam[sm * 16 + e / 16];
    __syncwarp();
    FragC acc;
    wmma::load_matrix_sync(acc, st, kLdSf, wmma::mem_row_major);
    products(acc, sm, sn);
    wmma::store_matrix_sync(st, acc, kLdSf, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int r = e / 16, cc = e % 16;
      sb[(sm * 16 + r) * kLdS + sn * 16 + cc] = as_bf(st[r * kLdSf + cc]);
    }
  }
}

// 16 bytes global -> shared without a register round trip (cp.async): every load of a kernel's
// prologue is in flight at once, where a loop of load-then-store waits out one memory latency
// (about a microsecond) per iteration. Complete at cp_async_wait_all(), then a barrier.
__device__ __forceinline__ void cp_async16(void* dst, const void* src) {
#ifdef __CUDA_ARCH__
  const auto s = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(s), "l"(src) : "memory");
#else
  *reinterpret_cast<uint4*>(dst) = *reinterpret_cast<const uint4*>(src);
#endif
}
// Groups: commit closes the copies issued since the last commit into a group (possibly empty);
// wait<N> returns once at most the N most recent groups are pending.
__device__ __forceinline__ void cp_async_commit() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef __CUDA_ARCH__
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}
__device__ __forceinline__ void cp_async_wait_all() {
  cp_async_commit();
  cp_async_wait<0>();
}

// Rows 0..num_rows-1 of `row_bytes` (a multiple of 16) from src (row stride src_ld bytes) into
// dst (row stride ld bytes) by cp.async; rows from `valid` on are zero.
__device__ __forceinline__ void load_rows_bytes(void* dst, int ld, const void* src, int64_t src_ld, int num_rows,
                                                int valid, int row_bytes) {
  const int vec = row_bytes / 16;
  for (int e = threadIdx.x; e < num_rows * vec; e += blockDim.x) {
    const int r = e / vec, p = e % vec;
    char* d = static_cast<char*>(dst) + r * ld + p * 16;
    if (r < valid) {
      cp_async16(d, static_cast<const char*>(src) + r * src_ld + p * 16);
    } else {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    }
  }
}
// Typed forms: strides and widths in elements (cols % 8 == 0 for BF16, % 4 for FP32).
__device__ __forceinline__ void load_rows(bf16* dst, int ld, const bf16_bits* src, int64_t src_ld, int num_rows,
                                          int valid, int cols) {
  load_rows_bytes(dst, ld * 2, src, src_ld * 2, num_rows, valid, cols * 2);
}
__device__ __forceinline__ void load_rows(float* dst, int ld, const float* src, int64_t src_ld, int num_rows,
                                          int valid, int cols) {
  load_rows_bytes(dst, ld * 4, src, src_ld * 4, num_rows, valid, cols * 4);
}

// The inverse: rows of a shared-memory tile to global memory.
__device__ __forceinline__ void store_rows(bf16_bits* __restrict__ dst, int64_t dst_ld, const bf16* src, int ld,
                                           int num_rows, int cols) {
  const int vec = cols / 8;
  for (int e = threadIdx.x; e < num_rows * vec; e += blockDim.x) {
    const int r = e / vec, p = e % vec;
    *reinterpret_cast<uint4*>(dst + r * dst_ld + p * 8) = *reinterpret_cast<const uint4*>(src + r * ld + p * 8);
  }
}

// In-chunk cumulative sum of the log decay, G_i = sum_{s <= i} g_s, in place over G [kC][kLdKf]
// (thread c < kDk walks channel c). Completes this thread's cp.async loads, and synchronises the
// block before and after.
__device__ __forceinline__ void cumsum_rows(float* G) {
  cp_async_wait_all();
  __syncthreads();
  if (threadIdx.x < kDk) {
    float cum = 0.f;
    for (int i = 0; i < kC; ++i) G[i * kLdKf + threadIdx.x] = (cum += G[i * kLdKf + threadIdx.x]);
  }
  __syncthreads();
}

}  // namespace moesim::cuda::kda_detail
