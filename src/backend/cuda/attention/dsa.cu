// SPDX-License-Identifier: MIT
// DSA kernels: lightning indexer scores and their gradient, radix top-k per query, sparse MQA
// attention forward and backward over the selected latents; see dsa.hpp. This file: the
// launchers (dispatching to the tensor-core variants by default: dsa_tc.cu for the indexer,
// dsa_mma.cu for the sparse attention), the top-k, and the FP32 SIMT variants.
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "backend/cuda/attention/dsa.hpp"
#include "backend/cuda/attention/dsa_mma.hpp"
#include "backend/cuda/attention/dsa_tc.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::to_bf;
using detail::to_f;
using detail::warp_sum;

constexpr int kThreads = 256;

// ---- Lightning indexer -------------------------------------------------------------------------

constexpr int kDi = 128;   // indexer head dim
constexpr int kIdxQ = 32;  // queries per block (8 warps x 4 rows)
constexpr int kIdxK = 64;  // keys per block (lane and lane + 32)

// Block per (64-key tile, 32-query tile, batch), skipping tiles above the diagonal. Heads in
// sequence: I(t, s) += w(t, j) ReLU(q(t, j) . k(s)).
__global__ void __launch_bounds__(kThreads)
    indexer_kernel(int T, int Hi, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                   const float* __restrict__ w, float* __restrict__ scores) {
  extern __shared__ float sm[];
  float* ks = sm;                      // [64][kDi + 1]
  float* qs = ks + kIdxK * (kDi + 1);  // [32][kDi]
  float* wsm = qs + kIdxQ * kDi;       // [32][Hi]
  const int k0 = blockIdx.x * kIdxK, q0 = blockIdx.y * kIdxQ, b = blockIdx.z;
  if (k0 > q0 + kIdxQ - 1) return;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int e = threadIdx.x; e < kIdxK * kDi; e += kThreads) {
    const int j = e / kDi, c = e % kDi, s = k0 + j;
    ks[j * (kDi + 1) + c] = s < T ? to_f(k[(static_cast<int64_t>(b) * T + s) * kDi + c]) : 0.f;
  }
  for (int e = threadIdx.x; e < kIdxQ * Hi; e += kThreads) {
    const int i = e / Hi, t = q0 + i;
    wsm[e] = t < T ? w[(static_cast<int64_t>(b) * T + t) * Hi + e % Hi] : 0.f;
  }
  float acc[4][2] = {};
  for (int hh = 0; hh < Hi; ++hh) {
    __syncthreads();
    for (int e = threadIdx.x; e < kIdxQ * kDi; e += kThreads) {
      const int i = e / kDi, c = e % kDi, t = q0 + i;
      qs[e] = t < T ? to_f(q[((static_cast<int64_t>(b) * T + t) * Hi + hh) * kDi + c]) : 0.f;
    }
    __syncthreads();
    float dot[4][2] = {};
    for (int c = 0; c < kDi; ++c) {
      const float k_a = ks[lane * (kDi + 1) + c], k_b = ks[(lane + 32) * (kDi + 1) + c];
      for (int r = 0; r < 4; ++r) {
        const float qv = qs[(warp + 8 * r) * kDi + c];
        dot[r][0] += qv * k_a;
        dot[r][1] += qv * k_b;
      }
    }
    for (int r = 0; r < 4; ++r) {
      const float wt = wsm[(warp + 8 * r) * Hi + hh];
      acc[r][0] += wt * fmaxf(dot[r][0], 0.f);
      acc[r][1] += wt * fmaxf(dot[r][1], 0.f);
    }
  }
  for (int r = 0; r < 4; ++r) {
    const int t = q0 + warp + 8 * r;
    for (int e = 0; e < 2; ++e) {
      const int s = k0 + lane + 32 * e;
      if (t < T && s <= t) scores[(static_cast<int64_t>(b) * T + t) * T + s] = acc[r][e];
    }
  }
}

// dq(t, j) = w(t, j) sum_s dI(t, s) [q.k > 0] k(s); dw(t, j) = sum_s dI(t, s) ReLU(q.k).
// Block per (32-query tile, head, batch); warps own queries, lanes keys.
__global__ void __launch_bounds__(kThreads)
    indexer_dq_kernel(int T, int Hi, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                      const float* __restrict__ w, const float* __restrict__ d_scores, float* __restrict__ dq,
                      float* __restrict__ dw) {
  extern __shared__ float sm[];
  float* qs = sm;                   // [32][kDi]
  float* ks = qs + 32 * kDi;        // [32][kDi + 1]
  float* gs = ks + 32 * (kDi + 1);  // [32][33]
  const int q0 = blockIdx.x * 32, hh = blockIdx.y, b = blockIdx.z;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int e = threadIdx.x; e < 32 * kDi; e += kThreads) {
    const int i = e / kDi, c = e % kDi, t = q0 + i;
    qs[e] = t < T ? to_f(q[((static_cast<int64_t>(b) * T + t) * Hi + hh) * kDi + c]) : 0.f;
  }
  float acc[4][kDi / 32] = {}, dwa[4] = {};
  const int num_kt = min(T - 1, q0 + 31) / 32 + 1;
  for (int kt = 0; kt < num_kt; ++kt) {
    const int k0 = kt * 32;
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * kDi; e += kThreads) {
      const int j = e / kDi, c = e % kDi, s = k0 + j;
      ks[j * (kDi + 1) + c] = s < T ? to_f(k[(static_cast<int64_t>(b) * T + s) * kDi + c]) : 0.f;
    }
    __syncthreads();
    float dot[4] = {};
    for (int c = 0; c < kDi; ++c) {
      const float kv = ks[lane * (kDi + 1) + c];
      for (int r = 0; r < 4; ++r) dot[r] += qs[(warp + 8 * r) * kDi + c] * kv;
    }
    const int s = k0 + lane;
    for (int r = 0; r < 4; ++r) {
      const int i = warp + 8 * r, t = q0 + i;
      const float gsc = (t < T && s <= t) ? d_scores[(static_cast<int64_t>(b) * T + t) * T + s] : 0.f;
      dwa[r] += gsc * fmaxf(dot[r], 0.f);
      gs[i * 33 + lane] = dot[r] > 0.f ? gsc : 0.f;
    }
    __syncwarp();
    for (int j = 0; j < 32; ++j) {
      for (int e = 0; e < kDi / 32; ++e) {
        const float kv = ks[j * (kDi + 1) + lane + 32 * e];
        for (int r = 0; r < 4; ++r) acc[r][e] += gs[(warp + 8 * r) * 33 + j] * kv;
      }
    }
  }
  for (int r = 0; r < 4; ++r) {
    const int t = q0 + warp + 8 * r;
    const float dws = warp_sum(dwa[r]);
    if (t >= T) continue;
    const int64_t row = (static_cast<int64_t>(b) * T + t) * Hi + hh;
    const float wt = w[row];
    for (int e = 0; e < kDi / 32; ++e) dq[row * kDi + lane + 32 * e] = wt * acc[r][e];
    if (lane == 0) dw[row] = dws;
  }
}

// dk(s) = sum_{t >= s} sum_j dI(t, s) w(t, j) [q.k > 0] q(t, j). Block per (32-key tile, batch);
// warps own keys, lanes queries; heads and query tiles in sequence.
__global__ void __launch_bounds__(kThreads)
    indexer_dk_kernel(int T, int Hi, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                      const float* __restrict__ w, const float* __restrict__ d_scores, float* __restrict__ dk) {
  extern __shared__ float sm[];
  float* ks = sm;                   // [32][kDi]
  float* qs = ks + 32 * kDi;        // [32][kDi + 1]
  float* gs = qs + 32 * (kDi + 1);  // [32][33] (key, query)
  float* gsc = gs + 32 * 33;        // [32 key][33 query] dI, transposed on load
  float* wsm = gsc + 32 * 33;       // [32]
  const int k0 = blockIdx.x * 32, b = blockIdx.y;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int e = threadIdx.x; e < 32 * kDi; e += kThreads) {
    const int j = e / kDi, c = e % kDi, s = k0 + j;
    ks[e] = s < T ? to_f(k[(static_cast<int64_t>(b) * T + s) * kDi + c]) : 0.f;
  }
  float acc[4][kDi / 32] = {};
  const int num_qt = (T + 31) / 32;
  for (int qt = blockIdx.x; qt < num_qt; ++qt) {
    const int q0 = qt * 32;
    __syncthreads();
    for (int e = threadIdx.x; e < 32 * 32; e += kThreads) {
      const int i = e / 32, j = e % 32, t = q0 + i, s = k0 + j;  // coalesced over keys
      gsc[j * 33 + i] = (t < T && s <= t) ? d_scores[(static_cast<int64_t>(b) * T + t) * T + s] : 0.f;
    }
    for (int hh = 0; hh < Hi; ++hh) {
      __syncthreads();
      for (int e = threadIdx.x; e < 32 * kDi; e += kThreads) {
        const int i = e / kDi, c = e % kDi, t = q0 + i;
        qs[i * (kDi + 1) + c] = t < T ? to_f(q[((static_cast<int64_t>(b) * T + t) * Hi + hh) * kDi + c]) : 0.f;
      }
      if (threadIdx.x < 32) {
        const int t = q0 + static_cast<int>(threadIdx.x);
        wsm[threadIdx.x] = t < T ? w[(static_cast<int64_t>(b) * T + t) * Hi + hh] : 0.f;
      }
      __syncthreads();
      float dot[4] = {};
      for (int c = 0; c < kDi; ++c) {
        const float qv = qs[lane * (kDi + 1) + c];
        for (int r = 0; r < 4; ++r) dot[r] += ks[(warp + 8 * r) * kDi + c] * qv;
      }
      for (int r = 0; r < 4; ++r) {
        const int j = warp + 8 * r;
        gs[j * 33 + lane] = dot[r] > 0.f ? gsc[j * 33 + lane] * wsm[lane] : 0.f;
      }
      __syncwarp();
      for (int i = 0; i < 32; ++i) {
        for (int e = 0; e < kDi / 32; ++e) {
          const float qv = qs[i * (kDi + 1) + lane + 32 * e];
          for (int r = 0; r < 4; ++r) acc[r][e] += gs[(warp + 8 * r) * 33 + i] * qv;
        }
      }
    }
  }
  for (int r = 0; r < 4; ++r) {
    const int s = k0 + warp + 8 * r;
    if (s >= T) continue;
    for (int e = 0; e < kDi / 32; ++e) dk[(static_cast<int64_t>(b) * T + s) * kDi + lane + 32 * e] = acc[r][e];
  }
}

// ---- Top-k ---------------------------------------------------------------------------------------

// Order-preserving map of a float to uint32: larger float, larger key.
__device__ __forceinline__ uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Block per (query, batch). Radix select, 8 bits per pass from the top: the K-th largest key is
// found exactly, then keys above it and enough keys equal to it are written.
__global__ void __launch_bounds__(kThreads)
    topk_kernel(int T, int K, const float* __restrict__ scores, int32_t* __restrict__ idx) {
  __shared__ uint32_t hist[256];
  __shared__ uint32_t sh_prefix, sh_remaining;
  __shared__ int cnt_gt, cnt_eq;
  const int t = blockIdx.x, b = blockIdx.y;
  const int n = t + 1;
  int32_t* out = idx + (static_cast<int64_t>(b) * T + t) * K;
  const float* row = scores + (static_cast<int64_t>(b) * T + t) * T;
  if (n <= K) {
    for (int j = threadIdx.x; j < K; j += kThreads) out[j] = j < n ? j : -1;
    return;
  }
  if (threadIdx.x == 0) {
    sh_prefix = 0;
    sh_remaining = static_cast<uint32_t>(K);
    cnt_gt = 0;
    cnt_eq = 0;
  }
  uint32_t mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int e = threadIdx.x; e < 256; e += kThreads) hist[e] = 0;
    __syncthreads();
    const uint32_t prefix = sh_prefix;
    for (int s = threadIdx.x; s < n; s += kThreads) {
      const uint32_t key = order_key(row[s]);
      if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      uint32_t rem = sh_remaining;
      int bin = 255;
      for (; bin > 0; --bin) {
        if (hist[bin] >= rem) break;
        rem -= hist[bin];
      }
      sh_remaining = rem;
      sh_prefix = prefix | (static_cast<uint32_t>(bin) << shift);
    }
    mask |= 255u << shift;
    __syncthreads();
  }
  const uint32_t thr = sh_prefix;
  const int num_eq = static_cast<int>(sh_remaining);  // keys equal to the threshold to take
  const int num_gt = K - num_eq;
  for (int s = threadIdx.x; s < n; s += kThreads) {
    const uint32_t key = order_key(row[s]);
    if (key > thr) {
      out[atomicAdd(&cnt_gt, 1)] = s;
    } else if (key == thr) {
      const int slot = atomicAdd(&cnt_eq, 1);
      if (slot < num_eq) out[num_gt + slot] = s;
    }
  }
}

// ---- Sparse attention ------------------------------------------------------------------------

constexpr int kLat = 512;  // latent (value) dims
constexpr int kRope = 64;
constexpr int kDq = kLat + kRope;  // 576: query/key dims
constexpr int kPadQ = kDq + 1;
constexpr int kHg = 16;  // heads per block
constexpr int kKt = 16;  // selected keys per tile

// Number of leading slots of query t's list that can be valid (valid slots come first).
__device__ __forceinline__ int num_slots(int t, int K) { return min(t + 1, K); }

// Loads the selected latents of one key tile as FP32 rows ([kKt][kPadQ]); slot -1 gives zeros.
__device__ __forceinline__ void load_latents(float* ks, int* sel_s, const int32_t* __restrict__ sel, int slot0,
                                             int slots, const bf16_bits* __restrict__ kv, int b, int T) {
  if (threadIdx.x < kKt) {
    const int slot = slot0 + static_cast<int>(threadIdx.x);
    sel_s[threadIdx.x] = slot < slots ? sel[slot] : -1;
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kKt * kDq; e += kThreads) {
    const int j = e / kDq, c = e % kDq, s = sel_s[j];
    ks[j * kPadQ + c] = s >= 0 ? to_f(kv[(static_cast<int64_t>(b) * T + s) * kDq + c]) : 0.f;
  }
}

// Block per (query, 16 heads, batch). Scores: thread (head tid/16, key tid%16); output: thread
// (head tid/16, dims tid%16 + 16 e). The 16 lanes of a head reduce with shuffles.
__global__ void __launch_bounds__(kThreads)
    sparse_fwd_kernel(int T, int H, int K, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ kv,
                      const int32_t* __restrict__ idx, float scale, bf16_bits* __restrict__ o, float* __restrict__ lse) {
  extern __shared__ float sm[];
  float* qs = sm;                // [16][kPadQ], pre-scaled
  float* ks = qs + kHg * kPadQ;  // [16][kPadQ]
  float* ps = ks + kKt * kPadQ;  // [16][17]
  int* sel_s = reinterpret_cast<int*>(ps + kHg * 17);
  const int t = blockIdx.x, h0 = blockIdx.y * kHg, b = blockIdx.z;
  const int hi = threadIdx.x / 16, l16 = threadIdx.x % 16;
  for (int e = threadIdx.x; e < kHg * kDq; e += kThreads) {
    const int i = e / kDq, c = e % kDq;
    qs[i * kPadQ + c] = to_f(q[((static_cast<int64_t>(b) * T + t) * H + h0 + i) * kDq + c]) * scale;
  }
  const int32_t* sel = idx + (static_cast<int64_t>(b) * T + t) * K;
  const int slots = num_slots(t, K);
  float m = -INFINITY, l = 0.f, acc[kLat / 16] = {};
  for (int slot0 = 0; slot0 < slots; slot0 += kKt) {
    __syncthreads();
    load_latents(ks, sel_s, sel, slot0, slots, kv, b, T);
    __syncthreads();
    float s = 0.f;
    for (int c = 0; c < kDq; ++c) s += qs[hi * kPadQ + c] * ks[l16 * kPadQ + c];
    const bool valid = sel_s[l16] >= 0;
    s = valid ? s : -INFINITY;
    float mx = s;
    for (int off = 8; off > 0; off >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
    const float mnew = fmaxf(m, mx);
    // A tile with no valid key keeps m = -inf; guard the exp of (-inf) - (-inf).
    const float p = valid ? __expf(s - mnew) : 0.f;
    const float corr = mnew == -INFINITY ? 1.f : __expf(m - mnew);
    float psum = p;
    for (int off = 8; off > 0; off >>= 1) psum += __shfl_xor_sync(0xffffffffu, psum, off);
    l = l * corr + psum;
    m = mnew;
    ps[hi * 17 + l16] = p;
    __syncwarp();
    for (int e = 0; e < kLat / 16; ++e) acc[e] *= corr;
    for (int j = 0; j < kKt; ++j) {
      const float pj = ps[hi * 17 + j];
      for (int e = 0; e < kLat / 16; ++e) acc[e] += pj * ks[j * kPadQ + l16 + 16 * e];
    }
  }
  const int64_t row = (static_cast<int64_t>(b) * T + t) * H + h0 + hi;
  const float inv = l > 0.f ? 1.f / l : 0.f;
  for (int e = 0; e < kLat / 16; ++e) o[row * kLat + l16 + 16 * e] = to_bf(acc[e] * inv);
  if (l16 == 0) lse[row] = m + logf(l);
}

// D = rowsum(dO * O) over the latent dims, one warp per (b, t, h) row.
__global__ void sparse_dot_kernel(int64_t rows, const bf16_bits* __restrict__ o, const bf16_bits* __restrict__ d_o,
                                  float* __restrict__ dsum) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= rows) return;
  const int lane = threadIdx.x % 32;
  float acc = 0.f;
  for (int d = lane; d < kLat; d += 32) acc += to_f(o[row * kLat + d]) * to_f(d_o[row * kLat + d]);
  acc = warp_sum(acc);
  if (lane == 0) dsum[row] = acc;
}

// dq = scale sum_j P_j (dP_j - D) k_j, block per (query, 16 heads, batch), P from lse.
__global__ void __launch_bounds__(kThreads)
    sparse_dq_kernel(int T, int H, int K, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ kv,
                     const int32_t* __restrict__ idx, const float* __restrict__ lse, const bf16_bits* __restrict__ d_o,
                     const float* __restrict__ dsum, float scale, float* __restrict__ dq) {
  extern __shared__ float sm[];
  float* qs = sm;                       // [16][kPadQ], pre-scaled
  float* ks = qs + kHg * kPadQ;         // [16][kPadQ]
  float* dos = ks + kKt * kPadQ;        // [16][kLat + 1]
  float* dss = dos + kHg * (kLat + 1);  // [16][17]
  int* sel_s = reinterpret_cast<int*>(dss + kHg * 17);
  const int t = blockIdx.x, h0 = blockIdx.y * kHg, b = blockIdx.z;
  const int hi = threadIdx.x / 16, l16 = threadIdx.x % 16;
  const int64_t row0 = (static_cast<int64_t>(b) * T + t) * H + h0;
  for (int e = threadIdx.x; e < kHg * kDq; e += kThreads) {
    qs[(e / kDq) * kPadQ + e % kDq] = to_f(q[row0 * kDq + e]) * scale;
  }
  for (int e = threadIdx.x; e < kHg * kLat; e += kThreads)
    dos[(e / kLat) * (kLat + 1) + e % kLat] = to_f(d_o[row0 * kLat + e]);
  const float my_lse = lse[row0 + hi], my_d = dsum[row0 + hi];
  const int32_t* sel = idx + (static_cast<int64_t>(b) * T + t) * K;
  const int slots = num_slots(t, K);
  constexpr int kCols = kDq / 16;
  float acc[kCols] = {};
  for (int slot0 = 0; slot0 < slots; slot0 += kKt) {
    __syncthreads();
    load_latents(ks, sel_s, sel, slot0, slots, kv, b, T);
    __syncthreads();
    float s = 0.f, dp = 0.f;
    for (int c = 0; c < kDq; ++c) s += qs[hi * kPadQ + c] * ks[l16 * kPadQ + c];
    for (int c = 0; c < kLat; ++c) dp += dos[hi * (kLat + 1) + c] * ks[l16 * kPadQ + c];
    const float p = sel_s[l16] >= 0 ? __expf(s - my_lse) : 0.f;
    dss[hi * 17 + l16] = p * (dp - my_d);
    __syncwarp();
    for (int j = 0; j < kKt; ++j) {
      const float dj = dss[hi * 17 + j];
      for (int e = 0; e < kCols; ++e) acc[e] += dj * ks[j * kPadQ + l16 + 16 * e];
    }
  }
  for (int e = 0; e < kCols; ++e) dq[(row0 + hi) * kDq + l16 + 16 * e] = scale * acc[e];
}

// dkv(s) += sum_h scale dS_h q_h (all 576 dims) + P_h dO_h (first 512): block per (query, batch);
// key tiles in sequence, head groups inside, the tile's gradient summed over all heads in
// registers, then added to dkv with one atomic per element (a key is shared by many queries).
__global__ void __launch_bounds__(kThreads)
    sparse_dkv_kernel(int T, int H, int K, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ kv,
                      const int32_t* __restrict__ idx, const float* __restrict__ lse, const bf16_bits* __restrict__ d_o,
                      const float* __restrict__ dsum, float scale, float* __restrict__ dkv) {
  extern __shared__ float sm[];
  float* ks = sm;                      // [16 keys][kPadQ]
  float* qs = ks + kKt * kPadQ;        // [16 heads][kPadQ]
  float* dos = qs + kHg * kPadQ;       // [16 heads][kLat + 1]
  float* ps = dos + kHg * (kLat + 1);  // [16 keys][17]
  float* dss = ps + kKt * 17;          // [16 keys][17]
  float* lse_s = dss + kKt * 17;       // [16]
  float* d_s = lse_s + kHg;            // [16]
  int* sel_s = reinterpret_cast<int*>(d_s + kHg);
  const int t = blockIdx.x, b = blockIdx.y;
  const int kj = threadIdx.x / 16, l16 = threadIdx.x % 16;
  const int32_t* sel = idx + (static_cast<int64_t>(b) * T + t) * K;
  const int slots = num_slots(t, K);
  constexpr int kCols = kDq / 16;
  for (int slot0 = 0; slot0 < slots; slot0 += kKt) {
    __syncthreads();
    load_latents(ks, sel_s, sel, slot0, slots, kv, b, T);
    float acc[kCols] = {};
    for (int h0 = 0; h0 < H; h0 += kHg) {
      __syncthreads();
      const int64_t row0 = (static_cast<int64_t>(b) * T + t) * H + h0;
      for (int e = threadIdx.x; e < kHg * kDq; e += kThreads) qs[(e / kDq) * kPadQ + e % kDq] = to_f(q[row0 * kDq + e]);
      for (int e = threadIdx.x; e < kHg * kLat; e += kThreads) {
        dos[(e / kLat) * (kLat + 1) + e % kLat] = to_f(d_o[row0 * kLat + e]);
      }
      if (threadIdx.x < kHg) {
        lse_s[threadIdx.x] = lse[row0 + threadIdx.x];
        d_s[threadIdx.x] = dsum[row0 + threadIdx.x];
      }
      __syncthreads();
      // thread (key kj, head l16)
      float s = 0.f, dp = 0.f;
      for (int c = 0; c < kDq; ++c) s += ks[kj * kPadQ + c] * qs[l16 * kPadQ + c];
      for (int c = 0; c < kLat; ++c) dp += ks[kj * kPadQ + c] * dos[l16 * (kLat + 1) + c];
      const float p = sel_s[kj] >= 0 ? __expf(scale * s - lse_s[l16]) : 0.f;
      ps[kj * 17 + l16] = p;
      dss[kj * 17 + l16] = scale * p * (dp - d_s[l16]);
      __syncwarp();
      // thread (key kj, dims l16 + 16 e)
      for (int i = 0; i < kHg; ++i) {
        const float pi = ps[kj * 17 + i], di = dss[kj * 17 + i];
        for (int e = 0; e < kCols; ++e) {
          const int c = l16 + 16 * e;
          float g = di * qs[i * kPadQ + c];
          if (c < kLat) g += pi * dos[i * (kLat + 1) + c];
          acc[e] += g;
        }
      }
    }
    const int s_key = sel_s[kj];
    if (s_key >= 0) {
      float* dst = dkv + (static_cast<int64_t>(b) * T + s_key) * kDq;
      for (int e = 0; e < kCols; ++e) atomicAdd(&dst[l16 + 16 * e], acc[e]);
    }
  }
}

template <class Kernel>
void set_smem(Kernel kernel, size_t bytes) {
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
}

}  // namespace

void dsa_check_shape(const DsaIndexerShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.heads < 1 || s.top_k < 1) {
    throw std::invalid_argument("DSA indexer: batch, seq, heads and top_k must be >= 1");
  }
  if (s.head_dim != kDi) throw std::invalid_argument("DSA indexer: head_dim must be 128");
  if (s.heads > 256) throw std::invalid_argument("DSA indexer: at most 256 heads");
  if (s.seq > 65535 || s.batch > 65535) throw std::invalid_argument("DSA indexer: shape too large");
}

void dsa_check_shape(const DsaAttentionShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.heads < 1 || s.top_k < 1) {
    throw std::invalid_argument("DSA attention: batch, seq, heads and top_k must be >= 1");
  }
  if (s.latent != kLat || s.rope != kRope) throw std::invalid_argument("DSA attention: latent must be 512, rope 64");
  if (s.heads % kHg != 0) throw std::invalid_argument("DSA attention: heads must be a multiple of 16");
  if (s.seq > (int64_t{1} << 30) || s.batch > 65535) throw std::invalid_argument("DSA attention: shape too large");
}

void dsa_indexer_scores(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w, float* scores,
                        cudaStream_t stream, AttentionImpl impl) {
  dsa_check_shape(s);
  if (impl == AttentionImpl::tensor_core) {
    dsa_tc::indexer_scores(s, q, k, w, scores, stream);
    return;
  }
  const int T = static_cast<int>(s.seq), Hi = static_cast<int>(s.heads);
  const size_t smem = sizeof(float) * (kIdxK * (kDi + 1) + kIdxQ * kDi + kIdxQ * Hi);
  set_smem(indexer_kernel, smem);
  const dim3 grid((T + kIdxK - 1) / kIdxK, (T + kIdxQ - 1) / kIdxQ, static_cast<unsigned>(s.batch));
  indexer_kernel<<<grid, kThreads, smem, stream>>>(T, Hi, q, k, w, scores);
  MOESIM_LAUNCH_CHECK();
}

void dsa_indexer_backward(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w,
                          const float* d_scores, float* dq, float* dk, float* dw, cudaStream_t stream,
                          AttentionImpl impl) {
  dsa_check_shape(s);
  if (impl == AttentionImpl::tensor_core) {
    dsa_tc::indexer_backward(s, q, k, w, d_scores, dq, dk, dw, stream);
    return;
  }
  const int T = static_cast<int>(s.seq), Hi = static_cast<int>(s.heads);
  const size_t smem_q = sizeof(float) * (32 * kDi + 32 * (kDi + 1) + 32 * 33);
  set_smem(indexer_dq_kernel, smem_q);
  indexer_dq_kernel<<<dim3((T + 31) / 32, Hi, static_cast<unsigned>(s.batch)), kThreads, smem_q, stream>>>(
      T, Hi, q, k, w, d_scores, dq, dw);
  MOESIM_LAUNCH_CHECK();
  const size_t smem_k = sizeof(float) * (32 * kDi + 32 * (kDi + 1) + 2 * 32 * 33 + 32);
  set_smem(indexer_dk_kernel, smem_k);
  indexer_dk_kernel<<<dim3((T + 31) / 32, static_cast<unsigned>(s.batch)), kThreads, smem_k, stream>>>(T, Hi, q, k, w,
                                                                                                       d_scores, dk);
  MOESIM_LAUNCH_CHECK();
}

void dsa_topk(const DsaIndexerShape& s, const float* scores, int32_t* idx, cudaStream_t stream) {
  dsa_check_shape(s);
  topk_kernel<<<dim3(static_cast<unsigned>(s.seq), static_cast<unsigned>(s.batch)), kThreads, 0, stream>>>(
      static_cast<int>(s.seq), static_cast<int>(s.top_k), scores, idx);
  MOESIM_LAUNCH_CHECK();
}

void dsa_sparse_forward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                        float scale, bf16_bits* o, float* lse, cudaStream_t stream, AttentionImpl impl) {
  dsa_check_shape(s);
  if (impl == AttentionImpl::tensor_core && s.heads % dsa_mma::kHeadGroup == 0) {
    dsa_mma::sparse_forward(s, q, kv, idx, scale, o, lse, stream);
    return;
  }
  const size_t smem = sizeof(float) * (kHg * kPadQ + kKt * kPadQ + kHg * 17) + sizeof(int) * kKt;
  set_smem(sparse_fwd_kernel, smem);
  const dim3 grid(static_cast<unsigned>(s.seq), static_cast<unsigned>(s.heads / kHg), static_cast<unsigned>(s.batch));
  sparse_fwd_kernel<<<grid, kThreads, smem, stream>>>(static_cast<int>(s.seq), static_cast<int>(s.heads),
                                                      static_cast<int>(s.top_k), q, kv, idx, scale, o, lse);
  MOESIM_LAUNCH_CHECK();
}

size_t dsa_sparse_backward_workspace_bytes(const DsaAttentionShape& s) {
  dsa_check_shape(s);
  return static_cast<size_t>(s.batch * s.seq * s.heads) * sizeof(float);
}

void dsa_sparse_backward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                         const bf16_bits* o, const float* lse, const bf16_bits* d_o, float scale, float* dq, float* dkv,
                         void* workspace, cudaStream_t stream, AttentionImpl impl) {
  dsa_check_shape(s);
  const int T = static_cast<int>(s.seq), H = static_cast<int>(s.heads), K = static_cast<int>(s.top_k);
  auto* dsum = static_cast<float*>(workspace);
  const int64_t rows = s.batch * s.seq * s.heads;
  sparse_dot_kernel<<<static_cast<unsigned>((rows + 7) / 8), 256, 0, stream>>>(rows, o, d_o, dsum);
  MOESIM_LAUNCH_CHECK();
  if (impl == AttentionImpl::tensor_core && s.heads % dsa_mma::kHeadGroup == 0) {
    MOESIM_CUDA_CHECK(cudaMemsetAsync(dkv, 0, static_cast<size_t>(s.batch * s.seq * kDq) * sizeof(float), stream));
    dsa_mma::sparse_backward(s, q, kv, idx, lse, dsum, d_o, scale, dq, dkv, stream);
    return;
  }
  const size_t smem_q = sizeof(float) * (kHg * kPadQ + kKt * kPadQ + kHg * (kLat + 1) + kHg * 17) + sizeof(int) * kKt;
  set_smem(sparse_dq_kernel, smem_q);
  sparse_dq_kernel<<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(H / kHg), static_cast<unsigned>(s.batch)),
                     kThreads, smem_q, stream>>>(T, H, K, q, kv, idx, lse, d_o, dsum, scale, dq);
  MOESIM_LAUNCH_CHECK();
  MOESIM_CUDA_CHECK(cudaMemsetAsync(dkv, 0, static_cast<size_t>(s.batch * s.seq * kDq) * sizeof(float), stream));
  const size_t smem_kv =
      sizeof(float) * (kKt * kPadQ + kHg * kPadQ + kHg * (kLat + 1) + 2 * kKt * 17 + 2 * kHg) + sizeof(int) * kKt;
  set_smem(sparse_dkv_kernel, smem_kv);
  sparse_dkv_kernel<<<dim3(static_cast<unsigned>(T), static_cast<unsigned>(s.batch)), kThreads, smem_kv, stream>>>(
      T, H, K, q, kv, idx, lse, d_o, dsum, scale, dkv);
  MOESIM_LAUNCH_CHECK();
}

KernelCost dsa_indexer_cost(const DsaIndexerShape& s) {
  const double pairs = static_cast<double>(s.batch) * causal_pairs(s.seq, s.seq);
  const double rows = static_cast<double>(s.batch * s.seq);
  KernelCost c;
  c.flops = 2.0 * static_cast<double>(s.heads * s.head_dim) * pairs;
  // q (bf16), k (bf16), w (fp32) in; the causal scores (fp32) out.
  c.bytes = rows * (static_cast<double>(s.heads * s.head_dim) * 2 + static_cast<double>(s.head_dim) * 2 +
                    static_cast<double>(s.heads) * 4) +
            pairs * 4;
  return c;
}

KernelCost dsa_indexer_backward_cost(const DsaIndexerShape& s) {
  const double pairs = static_cast<double>(s.batch) * causal_pairs(s.seq, s.seq);
  const double rows = static_cast<double>(s.batch * s.seq);
  const double hd = static_cast<double>(s.heads * s.head_dim), di = static_cast<double>(s.head_dim);
  const double hi = static_cast<double>(s.heads);
  KernelCost c;
  c.flops = 2 * dsa_indexer_cost(s).flops;
  c.bytes = rows * (hd * 2 + di * 2 + hi * 4) + pairs * 4 + rows * (hd + di + hi) * 4;
  return c;
}

KernelCost dsa_topk_cost(const DsaIndexerShape& s) {
  KernelCost c;
  c.bytes = static_cast<double>(s.batch) * causal_pairs(s.seq, s.seq) * 4 +
            static_cast<double>(s.batch * s.seq * s.top_k) * 4;
  return c;
}

KernelCost dsa_sparse_forward_cost(const DsaAttentionShape& s) {
  const double pairs = static_cast<double>(s.batch) * causal_pairs(s.seq, s.top_k);
  const double rows = static_cast<double>(s.batch * s.seq);
  const double h = static_cast<double>(s.heads), dq = static_cast<double>(s.latent + s.rope);
  const double dl = static_cast<double>(s.latent);
  KernelCost c;
  c.flops = 2.0 * h * (dq + dl) * pairs;
  // q, kv (each latent read once at best), idx in; o and lse out.
  c.bytes = rows * (h * dq * 2 + dq * 2 + static_cast<double>(s.top_k) * 4) + rows * h * (dl * 2 + 4);
  return c;
}

KernelCost dsa_sparse_backward_cost(const DsaAttentionShape& s) {
  const double rows = static_cast<double>(s.batch * s.seq);
  const double h = static_cast<double>(s.heads), dq = static_cast<double>(s.latent + s.rope);
  const double dl = static_cast<double>(s.latent);
  KernelCost c;
  c.flops = 2 * dsa_sparse_forward_cost(s).flops;
  c.bytes =
      rows * (h * dq * 2 + dq * 2 + static_cast<double>(s.top_k) * 4 + h * (2 * dl * 2 + 4)) + rows * (h * dq + dq) * 4;
  return c;
}

}  // namespace moesim::cuda
