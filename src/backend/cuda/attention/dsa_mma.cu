// SPDX-License-Identifier: MIT
// DSA sparse MQA attention on tensor cores with mma.sync m16n8k16 (BF16 operands, FP32
// accumulators). All heads of a query share its selected latents (MQA), so a block takes one
// query and 32 heads: the heads are the M dimension of every GEMM and each gathered latent row
// (576 BF16) is loaded once per block for all of them. The gathers are cp.async copies into a
// second tile buffer while the block computes on the first. 32 heads, not all of a query's: O
// (heads x 512, FP32) must fit in registers beside the Q slices, and 96 heads' O alone would take
// three quarters of the register file. The price is that a query's head groups each gather its
// rows (from L2, where the other groups' blocks, launched next to each other, put them).
//
// Forward, one pass with online softmax (FlashAttention-2, arXiv:2307.08691, algorithm 1): key
// tiles of 64. S = Q K^T is split over the 8 warps as 2 key halves x 4 slices of the 576 dims,
// so that each warp keeps its 32 x 144 slice of Q in registers for the whole block; the four
// partial sums meet in shared memory, where 8 threads per head row take the running max, the
// rescale factor and P (BF16). O (32 x 512, FP32) lives in registers, 64 columns per warp.
// Three block barriers per tile (tile in / partial S written / P written).
//
// Backward, one kernel: key tiles of 32; S and dP recomputed (P = exp(S scale - lse)), dS = P (dP
// - D) with D = rowsum(dO O); dQ = scale dS K accumulates in registers (72 columns per warp);
// dKV(tile) = scale dS^T Q + P^T dO, summed over the block's 32 heads in registers, is added to
// dkv with FP32 vector reductions (red.global.add.v4, 4 columns each). Summing a query's head
// groups first, in a thread-block cluster through distributed shared memory, cut the reductions
// 3x at 96 heads but took longer (two cluster barriers per tile): docs/calibration/attention.md.
//
// Measured at K3's shape (B 1, T 8192, 96 heads, top-2048; one H200, 2026-12-02, median of 5):
// forward 18.9 ms = 162 TFLOP/s, backward 67.6 ms = 91 TFLOP/s by the model's FLOP count.
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "backend/cuda/attention/dsa_mma.hpp"
#include "backend/cuda/attention/mma_ptx.cuh"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda::dsa_mma {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kLat = 512, kDq = 576;  // value dims (the latent); query/key dims (latent + rope 64)
constexpr int kHg = kHeadGroup;
constexpr int kThreads = 256;
constexpr int kChunks = kDq / 8;  // 16-byte pieces of a latent row
// Shared rows padded to an odd number of 16-byte pieces (1168 and 1040 bytes), so that the 8
// rows one ldmatrix reads fall in different banks.
constexpr int kLk = kDq + 8, kLv = kLat + 8;
constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

__device__ __forceinline__ int num_slots(int t, int K) { return min(t + 1, K); }

// Block index -> (batch, query, head group): the heaviest queries (most slots) first, and the
// head groups of one query next to each other, so that they find its gathered rows in L2.
struct BlockPos {
  int b, t, g;
};
__device__ __forceinline__ BlockPos block_pos(int T, int groups) {
  const int64_t blk = blockIdx.x;
  const int64_t bt = blk / groups;
  return {static_cast<int>(bt / T), T - 1 - static_cast<int>(bt % T), static_cast<int>(blk % groups)};
}

// Starts copying the latents of slots slot0 .. slot0 + Keys - 1 into dst [Keys][kLk] (zeros for
// slots past `slots` or holding -1) and their indices into sel_dst; one commit group. Each key
// row has kThreads / Keys threads, which read its index once and copy every (kThreads / Keys)-th
// 16-byte piece.
template <int Keys>
__device__ __forceinline__ void gather_async(bf16* dst, int* sel_dst, const int32_t* __restrict__ sel, int slot0,
                                             int slots, const bf16_bits* __restrict__ kv_b) {
  constexpr int kPer = kThreads / Keys;
  static_assert(kThreads % Keys == 0 && kChunks % kPer == 0, "whole rows per thread group");
  const int j = static_cast<int>(threadIdx.x) / kPer, p0 = static_cast<int>(threadIdx.x) % kPer, slot = slot0 + j;
  const int key = slot < slots ? __ldg(sel + slot) : -1;
  const bf16_bits* src = kv_b + (key >= 0 ? static_cast<int64_t>(key) * kDq : 0);
  const int bytes = key >= 0 ? 16 : 0;
  bf16* d = dst + j * kLk;
#pragma unroll
  for (int p = p0; p < kChunks; p += kPer) ptx::cp_async16(d + p * 8, src + p * 8, bytes);
  if (p0 == 0) sel_dst[j] = key;
  ptx::cp_async_commit();
}

// Copies `rows` rows of `cols` BF16 (contiguous in global) into rows of stride ld (cp.async, no commit).
__device__ __forceinline__ void copy_rows_async(bf16* dst, int ld, const bf16_bits* __restrict__ src, int rows,
                                                int cols) {
  const int vec = cols / 8;
  for (int e = threadIdx.x; e < rows * vec; e += kThreads) {
    const int r = e / vec, part = e - r * vec;
    ptx::cp_async16(dst + r * ld + part * 8, src + static_cast<int64_t>(r) * cols + part * 8, 16);
  }
}

// ---- Forward -----------------------------------------------------------------------------------

constexpr int kFk = 64;      // keys per tile
constexpr int kFs = kFk + 8; // FP32 partial-score rows: the float2 stores of a half warp miss each other's banks
constexpr int kFp = kFk + 8; // BF16 P rows (144 bytes, 9 pieces)
constexpr size_t kFwdSmem = sizeof(bf16) * 2 * kFk * kLk + sizeof(float) * 4 * kHg * kFs + sizeof(bf16) * kHg * kFp +
                            sizeof(int) * 2 * kFk + sizeof(float) * 2 * kHg;

__global__ void __launch_bounds__(kThreads, 1)
    fwd_kernel(int T, int H, int K, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ kv,
               const int32_t* __restrict__ idx, float scale, bf16_bits* __restrict__ o, float* __restrict__ lse) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* kbuf = reinterpret_cast<bf16*>(smem);                     // [2][64 keys][kLk]
  float* part = reinterpret_cast<float*>(kbuf + 2 * kFk * kLk);  // [4 dim slices][32 heads][kFs]
  bf16* pbuf = reinterpret_cast<bf16*>(part + 4 * kHg * kFs);    // [32 heads][kFp]
  int* sel_s = reinterpret_cast<int*>(pbuf + kHg * kFp);         // [2][64]
  float* alpha_s = reinterpret_cast<float*>(sel_s + 2 * kFk);    // [32] this tile's rescale
  float* inv_l_s = alpha_s + kHg;                                 // [32]

  const BlockPos pos = block_pos(T, H / kHg);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, cq = lane % 4;
  const int kh = warp / 4, kq = warp % 4;                          // S: keys kh*32.., dims kq*144..
  const int srow = threadIdx.x / 8, ssub = threadIdx.x % 8;        // softmax: 8 threads per head row
  const int lj = lane / 8, lr = lane % 8;                          // ldmatrix: matrix and row of this lane
  const int64_t row0 = (static_cast<int64_t>(pos.b) * T + pos.t) * H + pos.g * kHg;
  const int32_t* sel = idx + (static_cast<int64_t>(pos.b) * T + pos.t) * K;
  const bf16_bits* kv_b = kv + static_cast<int64_t>(pos.b) * T * kDq;
  const int slots = num_slots(pos.t, K);
  const int tiles = (slots + kFk - 1) / kFk;
  gather_async<kFk>(kbuf, sel_s, sel, 0, slots, kv_b);

  uint32_t qa[2][9][4];  // A fragments of Q rows 0..31, dims kq*144 .. +143
  {
    const auto* q32 = reinterpret_cast<const uint32_t*>(q + row0 * kDq);
    for (int mb = 0; mb < 2; ++mb) {
      for (int ks = 0; ks < 9; ++ks) {
        const int r = mb * 16 + gq, d = kq * 144 + ks * 16 + 2 * cq;
        qa[mb][ks][0] = __ldg(q32 + (r * kDq + d) / 2);
        qa[mb][ks][1] = __ldg(q32 + ((r + 8) * kDq + d) / 2);
        qa[mb][ks][2] = __ldg(q32 + (r * kDq + d + 8) / 2);
        qa[mb][ks][3] = __ldg(q32 + ((r + 8) * kDq + d + 8) / 2);
      }
    }
  }
  float oacc[2][8][4] = {};  // O rows 0..31, columns warp*64 .. +63
  float m_run = -INFINITY, l_run = 0.f;  // of head row srow, in log2 units
  const float sl2 = scale * kLog2e;

  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    const bf16* kt = kbuf + buf * kFk * kLk;
    ptx::cp_async_wait_all();
    __syncthreads();  // tile `it` is in; every warp is done with tile it - 1 and its buffer
    if (it + 1 < tiles) {
      gather_async<kFk>(kbuf + (buf ^ 1) * kFk * kLk, sel_s + (buf ^ 1) * kFk, sel, (it + 1) * kFk, slots, kv_b);
    }
    {  // partial S over this warp's dims
      float sacc[2][4][4] = {};
      for (int ks = 0; ks < 9; ++ks) {
        const int d0 = kq * 144 + ks * 16;
        for (int np = 0; np < 2; ++np) {
          uint32_t bfr[4];
          ptx::ldsm_x4(bfr, kt + (kh * 32 + np * 16 + lr + 8 * (lj / 2)) * kLk + d0 + 8 * (lj % 2));
          for (int mb = 0; mb < 2; ++mb) {
            ptx::mma_bf16(sacc[mb][2 * np], qa[mb][ks], bfr[0], bfr[1]);
            ptx::mma_bf16(sacc[mb][2 * np + 1], qa[mb][ks], bfr[2], bfr[3]);
          }
        }
      }
      float* pw = part + kq * kHg * kFs;
      for (int mb = 0; mb < 2; ++mb) {
        for (int nb = 0; nb < 4; ++nb) {
          const int r = mb * 16 + gq, c = kh * 32 + nb * 8 + 2 * cq;
          *reinterpret_cast<float2*>(pw + r * kFs + c) = make_float2(sacc[mb][nb][0], sacc[mb][nb][1]);
          *reinterpret_cast<float2*>(pw + (r + 8) * kFs + c) = make_float2(sacc[mb][nb][2], sacc[mb][nb][3]);
        }
      }
    }
    __syncthreads();
    {  // online softmax of row srow: keys ssub*4 .. +3 and 32 + ssub*4 .. +3
      const int c0 = ssub * 4, c1 = 32 + ssub * 4;
      float sv[8] = {};
      for (int kqq = 0; kqq < 4; ++kqq) {
        const float* pr = part + (kqq * kHg + srow) * kFs;
        const float4 x = *reinterpret_cast<const float4*>(pr + c0), y = *reinterpret_cast<const float4*>(pr + c1);
        sv[0] += x.x, sv[1] += x.y, sv[2] += x.z, sv[3] += x.w;
        sv[4] += y.x, sv[5] += y.y, sv[6] += y.z, sv[7] += y.w;
      }
      const int* ss = sel_s + buf * kFk;
      float mx = -INFINITY;
      for (int e = 0; e < 8; ++e) {
        const int key = e < 4 ? c0 + e : c1 + e - 4;
        sv[e] = ss[key] >= 0 ? sv[e] * sl2 : -INFINITY;
        mx = fmaxf(mx, sv[e]);
      }
      for (int off = 1; off < 8; off <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
      const float m_new = fmaxf(m_run, mx);
      float alpha = 1.f, sum = 0.f;
      if (m_new != -INFINITY) {  // a tile with no valid slot so far changes nothing
        alpha = exp2f(m_run - m_new);
        for (float& x : sv) {
          x = exp2f(x - m_new);
          sum += x;
        }
      } else {
        for (float& x : sv) x = 0.f;
      }
      for (int off = 1; off < 8; off <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, off);
      l_run = l_run * alpha + sum;
      m_run = m_new;
      bf16* pr = pbuf + srow * kFp;
      *reinterpret_cast<uint2*>(pr + c0) = make_uint2(ptx::pack_bf16(sv[0], sv[1]), ptx::pack_bf16(sv[2], sv[3]));
      *reinterpret_cast<uint2*>(pr + c1) = make_uint2(ptx::pack_bf16(sv[4], sv[5]), ptx::pack_bf16(sv[6], sv[7]));
      if (ssub == 0) alpha_s[srow] = alpha;
    }
    __syncthreads();
    // O = alpha O + P V over this warp's 64 value columns
    for (int mb = 0; mb < 2; ++mb) {
      const float a0 = alpha_s[mb * 16 + gq], a1 = alpha_s[mb * 16 + gq + 8];
      for (int nb = 0; nb < 8; ++nb) {
        oacc[mb][nb][0] *= a0, oacc[mb][nb][1] *= a0, oacc[mb][nb][2] *= a1, oacc[mb][nb][3] *= a1;
      }
    }
    for (int kk = 0; kk < kFk / 16; ++kk) {
      uint32_t pa[2][4];
      for (int mb = 0; mb < 2; ++mb) ptx::ldsm_x4(pa[mb], pbuf + (mb * 16 + lane % 16) * kFp + kk * 16 + (lane / 16) * 8);
      for (int np = 0; np < 4; ++np) {
        uint32_t vb[4];
        ptx::ldsm_x4_t(vb, kt + (kk * 16 + lr + 8 * (lj % 2)) * kLk + warp * 64 + np * 16 + 8 * (lj / 2));
        for (int mb = 0; mb < 2; ++mb) {
          ptx::mma_bf16(oacc[mb][2 * np], pa[mb], vb[0], vb[1]);
          ptx::mma_bf16(oacc[mb][2 * np + 1], pa[mb], vb[2], vb[3]);
        }
      }
    }
  }
  if (ssub == 0) {
    inv_l_s[srow] = l_run > 0.f ? 1.f / l_run : 0.f;
    lse[row0 + srow] = l_run > 0.f ? (m_run + log2f(l_run)) * kLn2 : -INFINITY;
  }
  __syncthreads();
  for (int mb = 0; mb < 2; ++mb) {
    const int r = mb * 16 + gq;
    const float i0 = inv_l_s[r], i1 = inv_l_s[r + 8];
    for (int nb = 0; nb < 8; ++nb) {
      const int c = warp * 64 + nb * 8 + 2 * cq;
      *reinterpret_cast<uint32_t*>(o + (row0 + r) * kLat + c) = ptx::pack_bf16(oacc[mb][nb][0] * i0, oacc[mb][nb][1] * i0);
      *reinterpret_cast<uint32_t*>(o + (row0 + r + 8) * kLat + c) =
          ptx::pack_bf16(oacc[mb][nb][2] * i1, oacc[mb][nb][3] * i1);
    }
  }
}

// ---- Backward ----------------------------------------------------------------------------------

constexpr int kBk = 32;       // keys per tile
constexpr int kBs = kBk + 8;  // FP32 partial rows
constexpr int kBp = kBk + 8;  // BF16 P / dS rows (80 bytes, 5 pieces)
constexpr int kBnb = 9;      // 8-column blocks of dQ and dKV per warp (72 of the 576 columns)
constexpr size_t kBwdSmem = sizeof(bf16) * (2 * kBk * kLk + kHg * kLk + kHg * kLv) + sizeof(float) * 2 * 4 * kHg * kBs +
                            sizeof(bf16) * 2 * kHg * kBp + sizeof(int) * 2 * kBk + sizeof(float) * 2 * kHg;

__global__ void __launch_bounds__(kThreads, 1)
    bwd_kernel(int T, int H, int K, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ kv,
               const int32_t* __restrict__ idx, const float* __restrict__ lse, const float* __restrict__ dsum,
               const bf16_bits* __restrict__ d_o, float scale, float* __restrict__ dq, float* __restrict__ dkv) {
  extern __shared__ __align__(128) unsigned char smem[];
  bf16* kbuf = reinterpret_cast<bf16*>(smem);                 // [2][32 keys][kLk]
  bf16* qs = kbuf + 2 * kBk * kLk;                            // [32 heads][kLk]
  bf16* dos = qs + kHg * kLk;                                 // [32 heads][kLv]
  float* sp = reinterpret_cast<float*>(dos + kHg * kLv);      // [4 dim slices][32 heads][kBs] partial S
  float* dpp = sp + 4 * kHg * kBs;                            // the same for dP
  bf16* pb = reinterpret_cast<bf16*>(dpp + 4 * kHg * kBs);    // [32 heads][kBp] P
  bf16* dsb = pb + kHg * kBp;                                 // [32 heads][kBp] scale dS
  int* sel_s = reinterpret_cast<int*>(dsb + kHg * kBp);       // [2][32]
  float* lse_s = reinterpret_cast<float*>(sel_s + 2 * kBk);   // [32] lse log2(e)
  float* d_s = lse_s + kHg;                                   // [32] D

  const BlockPos pos = block_pos(T, H / kHg);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, gq = lane / 4, cq = lane % 4;
  const int kh = warp / 4, kq = warp % 4;  // S and dP: keys kh*16 .. +15, dims kq*144 (S) or kq*128 (dP)
  const int lj = lane / 8, lr = lane % 8;
  const int xrow = lr + 8 * (lj % 2);  // ldmatrix .x2 .trans: k row of this lane's address
  const int64_t row0 = (static_cast<int64_t>(pos.b) * T + pos.t) * H + pos.g * kHg;
  const int32_t* sel = idx + (static_cast<int64_t>(pos.b) * T + pos.t) * K;
  const bf16_bits* kv_b = kv + static_cast<int64_t>(pos.b) * T * kDq;
  float* dkv_b = dkv + static_cast<int64_t>(pos.b) * T * kDq;
  const int slots = num_slots(pos.t, K);
  const int tiles = (slots + kBk - 1) / kBk;
  copy_rows_async(qs, kLk, q + row0 * kDq, kHg, kDq);
  copy_rows_async(dos, kLv, d_o + row0 * kLat, kHg, kLat);
  gather_async<kBk>(kbuf, sel_s, sel, 0, slots, kv_b);
  if (threadIdx.x < kHg) {
    lse_s[threadIdx.x] = lse[row0 + threadIdx.x] * kLog2e;
    d_s[threadIdx.x] = dsum[row0 + threadIdx.x];
  }
  const float sl2 = scale * kLog2e;
  const int erow = threadIdx.x / 8, ec0 = (threadIdx.x % 8) * 4;  // elementwise: 4 entries per thread
  float dqacc[2][9][4] = {};  // dQ rows 0..31, columns warp*72 .. +71

  for (int it = 0; it < tiles; ++it) {
    const int buf = it & 1;
    const bf16* kt = kbuf + buf * kBk * kLk;
    ptx::cp_async_wait_all();
    __syncthreads();
    if (it + 1 < tiles) {
      gather_async<kBk>(kbuf + (buf ^ 1) * kBk * kLk, sel_s + (buf ^ 1) * kBk, sel, (it + 1) * kBk, slots, kv_b);
    }
    {  // partial S = Q K^T and dP = dO V^T over this warp's dims
      float sacc[2][2][4] = {}, pacc[2][2][4] = {};
      const bf16* krow = kt + (kh * 16 + lr + 8 * (lj / 2)) * kLk + 8 * (lj % 2);
      for (int ks = 0; ks < 9; ++ks) {
        const int d0 = kq * 144 + ks * 16;
        uint32_t a[2][4], bfr[4];
        for (int mb = 0; mb < 2; ++mb) ptx::ldsm_x4(a[mb], qs + (mb * 16 + lane % 16) * kLk + d0 + (lane / 16) * 8);
        ptx::ldsm_x4(bfr, krow + d0);
        for (int mb = 0; mb < 2; ++mb) {
          ptx::mma_bf16(sacc[mb][0], a[mb], bfr[0], bfr[1]);
          ptx::mma_bf16(sacc[mb][1], a[mb], bfr[2], bfr[3]);
        }
      }
      for (int ks = 0; ks < 8; ++ks) {
        const int d0 = kq * 128 + ks * 16;
        uint32_t a[2][4], bfr[4];
        for (int mb = 0; mb < 2; ++mb) ptx::ldsm_x4(a[mb], dos + (mb * 16 + lane % 16) * kLv + d0 + (lane / 16) * 8);
        ptx::ldsm_x4(bfr, krow + d0);
        for (int mb = 0; mb < 2; ++mb) {
          ptx::mma_bf16(pacc[mb][0], a[mb], bfr[0], bfr[1]);
          ptx::mma_bf16(pacc[mb][1], a[mb], bfr[2], bfr[3]);
        }
      }
      for (int mb = 0; mb < 2; ++mb) {
        for (int nb = 0; nb < 2; ++nb) {
          const int r = mb * 16 + gq, c = kh * 16 + nb * 8 + 2 * cq;
          float* s0 = sp + (kq * kHg + r) * kBs + c;
          float* p0 = dpp + (kq * kHg + r) * kBs + c;
          *reinterpret_cast<float2*>(s0) = make_float2(sacc[mb][nb][0], sacc[mb][nb][1]);
          *reinterpret_cast<float2*>(s0 + 8 * kBs) = make_float2(sacc[mb][nb][2], sacc[mb][nb][3]);
          *reinterpret_cast<float2*>(p0) = make_float2(pacc[mb][nb][0], pacc[mb][nb][1]);
          *reinterpret_cast<float2*>(p0 + 8 * kBs) = make_float2(pacc[mb][nb][2], pacc[mb][nb][3]);
        }
      }
    }
    __syncthreads();
    {  // P and scale dS for head erow, keys ec0 .. +3
      float s[4] = {}, dp[4] = {};
      for (int kqq = 0; kqq < 4; ++kqq) {
        const float4 x = *reinterpret_cast<const float4*>(sp + (kqq * kHg + erow) * kBs + ec0);
        const float4 y = *reinterpret_cast<const float4*>(dpp + (kqq * kHg + erow) * kBs + ec0);
        s[0] += x.x, s[1] += x.y, s[2] += x.z, s[3] += x.w;
        dp[0] += y.x, dp[1] += y.y, dp[2] += y.z, dp[3] += y.w;
      }
      const float l2 = lse_s[erow], dd = d_s[erow];
      float p[4], ds[4];
      for (int e = 0; e < 4; ++e) {
        p[e] = sel_s[buf * kBk + ec0 + e] >= 0 ? exp2f(s[e] * sl2 - l2) : 0.f;
        ds[e] = scale * p[e] * (dp[e] - dd);
      }
      *reinterpret_cast<uint2*>(pb + erow * kBp + ec0) = make_uint2(ptx::pack_bf16(p[0], p[1]), ptx::pack_bf16(p[2], p[3]));
      *reinterpret_cast<uint2*>(dsb + erow * kBp + ec0) =
          make_uint2(ptx::pack_bf16(ds[0], ds[1]), ptx::pack_bf16(ds[2], ds[3]));
    }
    __syncthreads();
    // dQ += (scale dS) K over this warp's 72 columns
    for (int kk = 0; kk < kBk / 16; ++kk) {
      uint32_t a[2][4];
      for (int mb = 0; mb < 2; ++mb) ptx::ldsm_x4(a[mb], dsb + (mb * 16 + lane % 16) * kBp + kk * 16 + (lane / 16) * 8);
      for (int nb = 0; nb < 9; ++nb) {
        uint32_t bfr[2];
        ptx::ldsm_x2_t(bfr, kt + (kk * 16 + xrow) * kLk + warp * 72 + nb * 8);
        for (int mb = 0; mb < 2; ++mb) ptx::mma_bf16(dqacc[mb][nb], a[mb], bfr[0], bfr[1]);
      }
    }
    {  // dKV(tile) = (scale dS)^T Q + P^T dO over this warp's 72 columns, summed over the 32 heads
      float kacc[2][9][4] = {};
      for (int kk = 0; kk < kHg / 16; ++kk) {
        uint32_t ta[2][4], tp[2][4];  // A = dS^T, P^T (rows keys, k heads): transposed loads
        for (int mb = 0; mb < 2; ++mb) {
          const int off = (kk * 16 + lr + 8 * (lj / 2)) * kBp + mb * 16 + 8 * (lj % 2);
          ptx::ldsm_x4_t(ta[mb], dsb + off);
          ptx::ldsm_x4_t(tp[mb], pb + off);
        }
        for (int nb = 0; nb < 9; ++nb) {
          const int col = warp * 72 + nb * 8;
          uint32_t bfr[2];
          ptx::ldsm_x2_t(bfr, qs + (kk * 16 + xrow) * kLk + col);
          for (int mb = 0; mb < 2; ++mb) ptx::mma_bf16(kacc[mb][nb], ta[mb], bfr[0], bfr[1]);
          if (col < kLat) {
            ptx::ldsm_x2_t(bfr, dos + (kk * 16 + xrow) * kLv + col);
            for (int mb = 0; mb < 2; ++mb) ptx::mma_bf16(kacc[mb][nb], tp[mb], bfr[0], bfr[1]);
          }
        }
      }
      // Lanes c and c ^ 1 trade halves so that each holds 4 consecutive columns of one key row:
      // even c row gq (columns 2c .. 2c + 3), odd c row gq + 8 (columns 2c - 2 .. 2c + 1).
      const bool odd = cq & 1;
#pragma unroll
      for (int nb = 0; nb < kBnb; ++nb) {
#pragma unroll
        for (int mb = 0; mb < 2; ++mb) {
          const float c0 = kacc[mb][nb][0], c1 = kacc[mb][nb][1], c2 = kacc[mb][nb][2], c3 = kacc[mb][nb][3];
          const float r0 = __shfl_xor_sync(0xffffffffu, odd ? c0 : c2, 1);
          const float r1 = __shfl_xor_sync(0xffffffffu, odd ? c1 : c3, 1);
          const int key = sel_s[buf * kBk + mb * 16 + gq + (odd ? 8 : 0)];
          if (key < 0) continue;
          float* dst = dkv_b + static_cast<int64_t>(key) * kDq + warp * 72 + nb * 8 + 2 * (cq & ~1);
          if (odd) {
            ptx::red_add_v4(dst, r0, r1, c2, c3);
          } else {
            ptx::red_add_v4(dst, c0, c1, r0, r1);
          }
        }
      }
    }
  }
  for (int mb = 0; mb < 2; ++mb) {
    const int r = mb * 16 + gq;
    for (int nb = 0; nb < 9; ++nb) {
      const int c = warp * 72 + nb * 8 + 2 * cq;
      *reinterpret_cast<float2*>(dq + (row0 + r) * kDq + c) = make_float2(dqacc[mb][nb][0], dqacc[mb][nb][1]);
      *reinterpret_cast<float2*>(dq + (row0 + r + 8) * kDq + c) = make_float2(dqacc[mb][nb][2], dqacc[mb][nb][3]);
    }
  }
}

template <class Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

unsigned num_blocks(const DsaAttentionShape& s) {
  const int64_t n = s.batch * s.seq * (s.heads / kHg);
  if (n > INT32_MAX) throw std::invalid_argument("DSA attention: batch * seq * heads / 32 must be < 2^31");
  return static_cast<unsigned>(n);
}

}  // namespace

void sparse_forward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx, float scale,
                    bf16_bits* o, float* lse, cudaStream_t stream) {
  set_smem(fwd_kernel, kFwdSmem);
  fwd_kernel<<<num_blocks(s), kThreads, kFwdSmem, stream>>>(static_cast<int>(s.seq), static_cast<int>(s.heads),
                                                            static_cast<int>(s.top_k), q, kv, idx, scale, o, lse);
  MOESIM_LAUNCH_CHECK();
}

void sparse_backward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                     const float* lse, const float* dsum, const bf16_bits* d_o, float scale, float* dq, float* dkv,
                     cudaStream_t stream) {
  set_smem(bwd_kernel, kBwdSmem);
  bwd_kernel<<<num_blocks(s), kThreads, kBwdSmem, stream>>>(static_cast<int>(s.seq), static_cast<int>(s.heads),
                                                            static_cast<int>(s.top_k), q, kv, idx, lse, dsum, d_o,
                                                            scale, dq, dkv);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda::dsa_mma
