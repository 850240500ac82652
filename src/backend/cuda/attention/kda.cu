// SPDX-License-Identifier: MIT
// KDA chunked forward on tensor cores: the preparation kernel (per chunk: Aqk, Akk, the UT
// transform T, W, U) and the state kernel (across chunks), both also run by the backward
// (kda_backward.cu). See kda.hpp for the algorithm and layouts.
#include <algorithm>
#include <stdexcept>

#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/attention/kda_chunk.cuh"
#include "backend/cuda/check.hpp"

namespace moesim::cuda {
namespace kda_detail {
namespace {

using detail::to_bf;
using detail::to_f;

// Row offset of block I's decayed copy of k in the preparation kernel: block I needs rows
// 0 .. 16 I + 15, so the copies take 16, 32, 48 and 64 rows.
__device__ __forceinline__ int kref_offset(int I) { return kSub * I * (I + 1) / 2; }
constexpr int kKrefRows = kSub * 10;

constexpr size_t kPrepSmemBytes = sizeof(float) * (kC * kLdKf + 2 * kC * kLdCf + kWarps * 256 + kC) +
                                  sizeof(bf16) * (3 * kC * kLdK + kKrefRows * kLdK + 2 * kC * kLdK);

// One block per (chunk, head, batch). Decay-weighted products, e.g. Aqk_ij = sum_c q_ic k_jc
// exp(G_ic - G_jc), run as GEMMs with the decay split at the first row a = 16 I of the query's
// sub-chunk I (the sub-chunk form of flash-linear-attention's chunk_kda):
//   exp(G_i - G_j) = exp(G_i - G_a) exp(G_a - G_j),
// the first factor <= 1 (i >= a), the second <= 1 for j < a and at most exp(15 * 5) for j in block
// I (g >= -5 per token), so neither overflows FP32 or BF16 (same exponent range). Scaling by
// exp(G) and exp(-G) over a whole chunk would overflow at 64 * 5.
__global__ void __launch_bounds__(kThreads)
    kda_prep_kernel(int T, int H, int dv, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                    const bf16_bits* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                    float scale, ChunkWs ws) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* G = reinterpret_cast<float*>(smem);  // [C][kLdKf] log decay, then its cumulative sum
  float* akk = G + kC * kLdKf;                // [C][kLdCf] Akk_ij = sum_c k_ic k_jc exp(G_ic - G_jc), j < i
  float* tf = akk + kC * kLdCf;               // [C][kLdCf] T
  float* scratch = tf + kC * kLdCf;           // [warp][16 x 16] fragment copies
  float* bs = scratch + kWarps * 256;         // [C] beta
  bf16* qr = reinterpret_cast<bf16*>(bs + kC);  // [C][kLdK] q as given
  bf16* kr = qr + kC * kLdK;                  // [C][kLdK] k as given
  bf16* vr = kr + kC * kLdK;                  // [C][kLdK] v as given
  bf16* kref = vr + kC * kLdK;                // [kKrefRows][kLdK] block I: k_j exp(G_a - G_j), j < 16 I + 16
  bf16* qi = kref + kKrefRows * kLdK;         // [C][kLdK] scale q_i exp(G_i - G_a)
  bf16* ki = qi + kC * kLdK;                  // [C][kLdK] k_i exp(G_i - G_a)
  // Once the scores are done, over kref and qi:
  bf16* bgk = kref;           // [C][kLdK] beta k exp(G)
  bf16* bv = bgk + kC * kLdK;  // [C][kLdK] beta v
  bf16* tb = bv + kC * kLdK;   // [C][kLdC] T
  const int n = blockIdx.x, h = blockIdx.y, bb = blockIdx.z, nc = gridDim.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int t0 = n * kC, valid = min(kC, T - t0);
  const int64_t bh = static_cast<int64_t>(bb) * H + h;
  const int64_t row0 = (bh * nc + n) * kC;                       // first workspace row
  const int64_t tok0 = (static_cast<int64_t>(bb) * T + t0) * H + h;  // token of row 0; row i: tok0 + i H
  float* sc = scratch + warp * 256;

  load_rows(qr, kLdK, q + tok0 * kDk, static_cast<int64_t>(H) * kDk, kC, valid, kDk);
  load_rows(kr, kLdK, k + tok0 * kDk, static_cast<int64_t>(H) * kDk, kC, valid, kDk);
  load_rows(vr, kLdK, v + tok0 * dv, static_cast<int64_t>(H) * dv, kC, valid, dv);
  load_rows(G, kLdKf, g + tok0 * kDk, static_cast<int64_t>(H) * kDk, kC, valid, kDk);
  if (tid < kC) bs[tid] = tid < valid ? beta[tok0 + static_cast<int64_t>(tid) * H] : 0.f;
  cumsum_rows(G);

  for (int e = tid; e < kKrefRows * kDk; e += kThreads) {
    const int r = e / kDk, c = e % kDk;
    const int I = r < 16 ? 0 : r < 48 ? 1 : r < 96 ? 2 : 3, j = r - kref_offset(I);
    kref[r * kLdK + c] = as_bf(as_f(kr[j * kLdK + c]) * __expf(G[kSub * I * kLdKf + c] - G[j * kLdKf + c]));
  }
  for (int e = tid; e < kC * kDk; e += kThreads) {
    const int i = e / kDk, c = e % kDk, a = i & ~(kSub - 1);
    const float d = __expf(G[i * kLdKf + c] - G[a * kLdKf + c]);
    qi[i * kLdK + c] = as_bf(scale * as_f(qr[i * kLdK + c]) * d);
    ki[i * kLdK + c] = as_bf(as_f(kr[i * kLdK + c]) * d);
  }
  __syncthreads();

  // Score tiles (I, J): Aqk (j <= i) to the workspace, Akk (j < i) to shared memory.
  for (int job = warp; job < 32; job += kWarps) {
    const int is_kk = job / 16, I = (job % 16) / 4, J = job % 4;
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    if (J <= I) mma_range<Row, Col>(acc, is_kk ? ki : qi, kLdK, kref + kref_offset(I) * kLdK, kLdK, I, J, 0, kDk);
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int i = kSub * I + e / 16, j = kSub * J + e % 16;
      if (is_kk) {
        akk[i * kLdCf + j] = j < i ? sc[e] : 0.f;
      } else {
        ws.aqk[(row0 + i) * kC + j] = to_bf(j <= i ? sc[e] : 0.f);
      }
    }
    __syncwarp();
  }
  __syncthreads();

  // UT transform T = L^-1, L = I + Diag(beta) Akk (unit lower triangular), in FP32 by blocks of
  // 16 (as FLA's solve_tril): the four diagonal blocks by forward substitution at once,
  //   T_i = e_i - beta_i sum_{j < i} Akk_ij T_j  (within the block),
  // then the blocks below the diagonal, one distance d = I - J at a time (they need d' < d),
  //   T_IJ = -T_II X_IJ,  X_IJ = sum_{K = J}^{I - 1} Diag(beta_I) Akk_IK T_KJ.
  // A 16-step chain instead of a 64-step one. Blocks above the diagonal are zero.
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    if (j / kSub > i / kSub) tf[i * kLdCf + j] = 0.f;
  }
  {
    // Thread (block, column c, part): a column's 4 threads share a warp, so the rows written need
    // only a warp barrier.
    const int blk = tid / 64, c = (tid % 64) / 4, part = tid % 4, base = kSub * blk;
    for (int ii = 0; ii < kSub; ++ii) {
      const int i = base + ii;
      float sum = 0.f;
      for (int jj = c + part; jj < ii; jj += 4) sum += akk[i * kLdCf + base + jj] * tf[(base + jj) * kLdCf + base + c];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      if (part == 0) tf[i * kLdCf + base + c] = (ii == c ? 1.f : 0.f) - bs[i] * sum;
      __syncwarp();
    }
  }
  __syncthreads();
  float* xb = scratch;  // [up to 3 blocks][16][16]
  for (int d = 1; d < 4; ++d) {
    const int num_blocks = 4 - d;  // (I, J) = (J + d, J), J = 0 .. 3 - d
    for (int e = tid; e < num_blocks * 256; e += kThreads) {
      const int J = e / 256, I = J + d, r = (e % 256) / 16, cc = e % 16, i = kSub * I + r;
      float x = 0.f;
      for (int kk = kSub * J; kk < kSub * I; ++kk) x += akk[i * kLdCf + kk] * tf[kk * kLdCf + kSub * J + cc];
      xb[e] = bs[i] * x;
    }
    __syncthreads();
    for (int e = tid; e < num_blocks * 256; e += kThreads) {
      const int J = e / 256, I = J + d, r = (e % 256) / 16, cc = e % 16, i = kSub * I + r;
      float t = 0.f;
      for (int kk = 0; kk < kSub; ++kk) t += tf[i * kLdCf + kSub * I + kk] * xb[J * 256 + kk * 16 + cc];
      tf[i * kLdCf + kSub * J + cc] = -t;
    }
    __syncthreads();
  }

  for (int e = tid; e < kC * kDk; e += kThreads) {
    const int i = e / kDk, c = e % kDk;
    const float gi = G[i * kLdKf + c], gl = G[(kC - 1) * kLdKf + c];
    const float kv = as_f(kr[i * kLdK + c]), eg = __expf(gi);
    bgk[i * kLdK + c] = as_bf(bs[i] * kv * eg);
    ws.gq[(row0 + i) * kDk + c] = to_bf(scale * as_f(qr[i * kLdK + c]) * eg);
    ws.kg[(row0 + i) * kDk + c] = to_bf(kv * __expf(gl - gi));
    if (c < dv) bv[i * kLdK + c] = as_bf(bs[i] * as_f(vr[i * kLdK + c]));
  }
  for (int e = tid; e < kC * kC; e += kThreads) {
    const int i = e / kC, j = e % kC;
    const float t = tf[i * kLdCf + j];
    tb[i * kLdC + j] = as_bf(t);
    ws.tm[(row0 + i) * kC + j] = to_bf(t);
  }
  if (tid < kDk) ws.lam[(bh * nc + n) * kDk + tid] = __expf(G[(kC - 1) * kLdKf + tid]);
  __syncthreads();

  // W = T (beta exp(G) k), U = T (beta v); T is lower triangular.
  const int nt_u = dv / 16;
  for (int job = warp; job < 32 + 4 * nt_u; job += kWarps) {
    const bool is_u = job >= 32;
    const int jj = is_u ? job - 32 : job, nt = is_u ? nt_u : 8, tm = jj / nt, tn = jj % nt;
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    mma_range<Row, Row>(acc, tb, kLdC, is_u ? bv : bgk, kLdK, tm, tn, 0, kSub * (tm + 1));
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int i = tm * 16 + e / 16, c = tn * 16 + e % 16;
      if (is_u) {
        ws.u[(row0 + i) * dv + c] = sc[e];
      } else {
        ws.w[(row0 + i) * kDk + c] = to_bf(sc[e]);
      }
    }
    __syncwarp();
  }
}

constexpr size_t kStateSmemBytes = sizeof(float) * (kDk * kLdSf + 2 * kC * kLdSf + kDk) +
                                   sizeof(bf16) * (kDk * kLdS + 3 * kC * kLdK + kC * kLdC + kC * kLdS);

// One block per (32 value columns, head, batch), chunks in sequence (columns of S evolve
// independently). Per chunk, with S the state entering it (FP32 in shared memory, a BF16 copy
// for the tensor cores):
//   D = U - W S;  O = (Gamma Q) S + Aqk D;  S <- Diag(exp(G_last)) S + Kg^T D.
// Warp w owns the D and O tile (w / 2, w % 2) and the S tiles (j / 2, j % 2), j = w, w + 8.
// kForward writes O; otherwise the state entering each chunk goes to `states` and D over U.
// Each phase's tiles are fetched (cp.async) while the phases before it compute: A = {W, U} for
// D, B = {Gamma Q, Aqk} for O, C = {Kg, exp(G_last)} for the update; A and B of chunk n + 1 are
// issued as soon as chunk n's D and O phases are done with their buffers, C at the chunk's start.
template <bool kForward>
__global__ void __launch_bounds__(kThreads, 2)
    kda_state_kernel(int T, int H, int dv, int nc, ChunkWs ws, bf16_bits* __restrict__ o,
                     bf16_bits* __restrict__ states) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* sf = reinterpret_cast<float*>(smem);  // [dk][kLdSf] S
  float* df = sf + kDk * kLdSf;                // [C][kLdSf] W S, then O
  float* uf = df + kC * kLdSf;                 // [C][kLdSf] U
  float* lam = uf + kC * kLdSf;                // [dk]
  bf16* sb = reinterpret_cast<bf16*>(lam + kDk);  // [dk][kLdS]
  bf16* wt = sb + kDk * kLdS;                  // [C][kLdK] W
  bf16* kgt = wt + kC * kLdK;                  // [C][kLdK] Kg
  bf16* gqt = kgt + kC * kLdK;                 // [C][kLdK] Gamma Q (forward)
  bf16* aqt = gqt + kC * kLdK;                 // [C][kLdC] Aqk (forward)
  bf16* db = aqt + kC * kLdC;                  // [C][kLdS] D
  const int h = blockIdx.y, bb = blockIdx.z, d0 = blockIdx.x * kSlice;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t bh = static_cast<int64_t>(bb) * H + h;
  auto load_a = [&](int n) {
    const int64_t r0 = (bh * nc + n) * kC;
    load_rows(wt, kLdK, ws.w + r0 * kDk, kDk, kC, kC, kDk);
    load_rows(uf, kLdSf, ws.u + r0 * dv + d0, dv, kC, kC, kSlice);
  };
  auto load_b = [&](int n) {
    const int64_t r0 = (bh * nc + n) * kC;
    load_rows(gqt, kLdK, ws.gq + r0 * kDk, kDk, kC, kC, kDk);
    load_rows(aqt, kLdC, ws.aqk + r0 * kC, kC, kC, kC, kC);
  };
  auto load_c = [&](int n) {
    const int64_t r0 = (bh * nc + n) * kC;
    load_rows(kgt, kLdK, ws.kg + r0 * kDk, kDk, kC, kC, kDk);
    load_rows(lam, kDk, ws.lam + (bh * nc + n) * kDk, kDk, 1, 1, kDk);
  };
  for (int e = tid; e < kDk * kSlice; e += kThreads) {
    sf[(e / kSlice) * kLdSf + e % kSlice] = 0.f;
    sb[(e / kSlice) * kLdS + e % kSlice] = as_bf(0.f);
  }
  load_a(0);
  cp_async_commit();
  if (kForward) load_b(0);
  cp_async_commit();  // (empty without the O phase: the group counts below stay the same)
  const int tm = warp / 2, tn = warp % 2;
  for (int n = 0; n < nc; ++n) {
    const int64_t row0 = (bh * nc + n) * kC;
    __syncthreads();  // the previous update is done: Kg, exp(G_last) and S are free
    if (!kForward) store_rows(states + (bh * nc + n) * kDk * dv + d0, dv, sb, kLdS, kDk, kSlice);
    load_c(n);
    cp_async_commit();
    cp_async_wait<2>();  // A (B and C may still be in flight)
    __syncthreads();

    float* dt = df + tm * 16 * kLdSf + tn * 16;
    {
      FragC acc;
      wmma::fill_fragment(acc, 0.f);
      mma_range<Row, Row>(acc, wt, kLdK, sb, kLdS, tm, tn, 0, kDk);
      wmma::store_matrix_sync(dt, acc, kLdSf, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, cc = e % 16, i = tm * 16 + r, c = tn * 16 + cc;
        const float d = uf[i * kLdSf + c] - dt[r * kLdSf + cc];
        db[i * kLdS + c] = as_bf(d);
        if (!kForward) ws.u[(row0 + i) * dv + d0 + c] = d;
      }
    }
    cp_async_wait<1>();  // B
    __syncthreads();     // D is complete; W and U are free
    if (n + 1 < nc) load_a(n + 1);
    cp_async_commit();
    if (kForward) {
      FragC acc;
      wmma::fill_fragment(acc, 0.f);
      mma_range<Row, Row>(acc, gqt, kLdK, sb, kLdS, tm, tn, 0, kDk);
      mma_range<Row, Row>(acc, aqt, kLdC, db, kLdS, tm, tn, 0, kSub * (tm + 1));  // Aqk is lower triangular
      wmma::store_matrix_sync(dt, acc, kLdSf, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, cc = e % 16, t = n * kC + tm * 16 + r;
        if (t < T) o[((static_cast<int64_t>(bb) * T + t) * H + h) * dv + d0 + tn * 16 + cc] = to_bf(dt[r * kLdSf + cc]);
      }
    }
    cp_async_wait<1>();  // C (the next A may still be in flight)
    __syncthreads();     // every warp has read S (and Gamma Q, Aqk) before the update
    if (kForward && n + 1 < nc) load_b(n + 1);
    cp_async_commit();
    decay_and_add(sf, sb, lam, warp, lane, [&](FragC& acc, int sm, int sn) {
      mma_range<Col, Row>(acc, kgt, kLdK, db, kLdS, sm, sn, 0, kC);  // + Kg^T D
    });
  }
}

}  // namespace

size_t chunk_ws_bytes(const KdaShape& s) {
  const int64_t rows = s.batch * s.heads * num_chunks(s) * kC;
  const int64_t halves = rows * (3 * kDk + 2 * kC);
  const int64_t floats = rows * s.head_dim_v + s.batch * s.heads * num_chunks(s) * kDk;
  return static_cast<size_t>(halves) * sizeof(bf16_bits) + static_cast<size_t>(floats) * sizeof(float);
}

ChunkWs split_chunk_ws(const KdaShape& s, void* ws) {
  const int64_t rows = s.batch * s.heads * num_chunks(s) * kC;
  ChunkWs w{};
  w.w = static_cast<bf16_bits*>(ws);
  w.gq = w.w + rows * kDk;
  w.kg = w.gq + rows * kDk;
  w.aqk = w.kg + rows * kDk;
  w.tm = w.aqk + rows * kC;
  w.u = reinterpret_cast<float*>(w.tm + rows * kC);
  w.lam = w.u + rows * s.head_dim_v;
  return w;
}

void launch_prep(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                 const float* beta, float scale, const ChunkWs& ws, cudaStream_t stream) {
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kda_prep_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kPrepSmemBytes)));
  const dim3 grid(static_cast<unsigned>(num_chunks(s)), static_cast<unsigned>(s.heads), static_cast<unsigned>(s.batch));
  kda_prep_kernel<<<grid, kThreads, kPrepSmemBytes, stream>>>(static_cast<int>(s.seq), static_cast<int>(s.heads),
                                                              static_cast<int>(s.head_dim_v), q, k, v, g, beta, scale,
                                                              ws);
  MOESIM_LAUNCH_CHECK();
}

void launch_state(const KdaShape& s, const ChunkWs& ws, bf16_bits* o, bf16_bits* states, cudaStream_t stream) {
  auto* kernel = o ? kda_state_kernel<true> : kda_state_kernel<false>;
  MOESIM_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kStateSmemBytes)));
  const dim3 grid(static_cast<unsigned>(s.head_dim_v / kSlice), static_cast<unsigned>(s.heads),
                  static_cast<unsigned>(s.batch));
  kernel<<<grid, kThreads, kStateSmemBytes, stream>>>(static_cast<int>(s.seq), static_cast<int>(s.heads),
                                                      static_cast<int>(s.head_dim_v),
                                                      static_cast<int>(num_chunks(s)), ws, o, states);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace kda_detail

void kda_check_shape(const KdaShape& s) {
  using kda_detail::kC;
  using kda_detail::kDk;
  using kda_detail::kSlice;
  if (s.batch < 1 || s.seq < 1 || s.heads < 1) throw std::invalid_argument("KDA: batch, seq and heads must be >= 1");
  if (s.head_dim_k != kDk) throw std::invalid_argument("KDA: head_dim_k must be 128");
  if (s.head_dim_v % kSlice != 0 || s.head_dim_v < kSlice || s.head_dim_v > kDk) {
    throw std::invalid_argument("KDA: head_dim_v must be a multiple of 32 in [32, 128]");
  }
  if (s.chunk != kC) throw std::invalid_argument("KDA: chunk must be 64");
  if (s.seq > (int64_t{1} << 30) || s.heads > 65535 || s.batch > 65535)
    throw std::invalid_argument("KDA: shape too large");
}

size_t kda_forward_workspace_bytes(const KdaShape& s) {
  kda_check_shape(s);
  return kda_detail::chunk_ws_bytes(s);
}

void kda_forward(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                 const float* beta, float scale, bf16_bits* o, void* workspace, cudaStream_t stream) {
  kda_check_shape(s);
  const kda_detail::ChunkWs ws = kda_detail::split_chunk_ws(s, workspace);
  kda_detail::launch_prep(s, q, k, v, g, beta, scale, ws, stream);
  kda_detail::launch_state(s, ws, o, nullptr, stream);
}

KernelCost kda_forward_cost(const KdaShape& s) {
  const double th = static_cast<double>(s.batch * s.seq * s.heads);
  const double dh = static_cast<double>(s.head_dim_k), c = static_cast<double>(std::min(s.chunk, s.seq));
  KernelCost cost;
  cost.flops = th * (6 * dh * dh + 3 * c * dh + c * c);
  // q, k (bf16), g (fp32), v (bf16), beta (fp32) in; o (bf16) out.
  cost.bytes = th * (2 * dh * 2 + dh * 4 + 4 + static_cast<double>(s.head_dim_v) * 2 * 2);
  return cost;
}

KernelCost kda_backward_cost(const KdaShape& s) {
  const double th = static_cast<double>(s.batch * s.seq * s.heads);
  const double dh = static_cast<double>(s.head_dim_k), dv = static_cast<double>(s.head_dim_v);
  KernelCost cost;
  cost.flops = 2 * kda_forward_cost(s).flops;
  // In: q, k, v, do (bf16), g, beta (fp32). Out: dq, dk, dg, dv, dbeta (fp32).
  cost.bytes = th * ((2 * dh + 2 * dv) * 2 + dh * 4 + 4) + th * ((3 * dh + dv) * 4 + 4);
  return cost;
}

}  // namespace moesim::cuda
