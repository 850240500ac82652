// SPDX-License-Identifier: MIT
// KDA chunked forward and recurrent backward; see kda.hpp for the algorithm and layouts.
// Straightforward FP32 SIMT kernels (no tensor cores yet): correct first, roofline recorded in
// docs/calibration/attention.md.
#include <algorithm>
#include <stdexcept>
#include <string>

#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::to_bf;
using detail::to_f;

constexpr int kDk = 128;                    // key/query head dim (thread c of a block owns channel c)
constexpr int kC = 64;                      // chunk length
constexpr int kPad = kC + 1;                // transposed [channel][row] tiles: odd stride, no bank conflicts
constexpr int kInterCols = 32;              // value columns per inter-chunk block
constexpr int kBwdWarpCols = 4;             // value columns per backward warp
constexpr int kBwdCols = 8 * kBwdWarpCols;  // value columns per backward block (8 warps)
constexpr int kLaneRows = kDk / 32;         // state rows per lane in the backward
constexpr int kSeg = 4;                     // backward checkpoint interval (tokens replayed)

constexpr int kIntraThreads = 512;  // 16 warps: one block per SM, latency needs the warps
constexpr int kXs = kDk + 1;        // row stride of X: the transposed copy-out reads columns
constexpr size_t kIntraSmemFloats = 3 * kDk * kPad + kC * kPad + kC + 2 * kC * kXs;
constexpr size_t kInterSmemFloats = kDk * kInterCols + kC * kDk + kC * kC + kC * kInterCols;
constexpr size_t kBwdSmemFloats =
    kSeg * kBwdCols * kDk + kSeg * 3 * kDk + kSeg + 3 * kSeg * kDk + 2 * kSeg * kBwdCols + kSeg;

// Per chunk, "_t" arrays are stored transposed ([dk][C] or [C][C] blocks) so that the
// inter-chunk kernel reads 4 consecutive rows with one 16-byte shared-memory load.
struct FwdWorkspace {
  float* qg_t;   // [B, H, NC, dk, C] scale * q * exp(G)   (G: cumulative log decay in the chunk)
  float* kg;     // [B, H, Tp, dk]    k * exp(G_last - G)
  float* w_t;    // [B, H, NC, dk, C] W = M (Gamma K)
  float* u;      // [B, H, Tp, dv]    U = M V
  float* aqk_t;  // [B, H, NC, C, C]  ((Gamma Q)(K / Gamma)^T)^T: [j][i], zero for j > i
  float* gl;     // [B, H, NC, dk]    exp(G_last)
};

int64_t num_chunks(const KdaShape& s) { return (s.seq + kC - 1) / kC; }

FwdWorkspace split_fwd(const KdaShape& s, void* ws) {
  const int64_t tp = num_chunks(s) * kC, bh = s.batch * s.heads;
  auto* p = static_cast<float*>(ws);
  FwdWorkspace w{};
  w.qg_t = p;
  w.kg = w.qg_t + bh * tp * kDk;
  w.w_t = w.kg + bh * tp * kDk;
  w.u = w.w_t + bh * tp * kDk;
  w.aqk_t = w.u + bh * tp * s.head_dim_v;
  w.gl = w.aqk_t + bh * tp * kC;
  return w;
}

// One block per (chunk, head, batch), kIntraThreads threads. Padding rows past T are identity
// steps (k = q = v = 0, g = 0, beta = 0), so they change nothing.
__global__ void __launch_bounds__(kIntraThreads)
    kda_intra_kernel(int T, int H, int dv, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                     const bf16_bits* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                     float scale, FwdWorkspace ws) {
  extern __shared__ float sm[];
  float* kt = sm;                // [dk][kPad]
  float* qt = kt + kDk * kPad;   // [dk][kPad], pre-scaled
  float* gt = qt + kDk * kPad;   // [dk][kPad] log decay, then its cumulative sum in the chunk
  float* akk = gt + kDk * kPad;  // [C][kPad]
  float* bs = akk + kC * kPad;   // [C]
  float* xw = bs + kC;           // [C][kXs] Gamma K, solved in place into W
  float* xu = xw + kC * kXs;     // [C][kXs] V, solved in place into U
  const int n = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int num_c = static_cast<int>(gridDim.x);
  const int64_t tp = static_cast<int64_t>(num_c) * kC;
  const int64_t bh = static_cast<int64_t>(b) * H + h;
  const int tid = threadIdx.x;
  const int t0 = n * kC;

  for (int e = tid; e < kC * kDk; e += kIntraThreads) {
    const int i = e / kDk, c = e % kDk, t = t0 + i;
    float kv = 0.f, qv = 0.f, gv = 0.f, vv = 0.f;
    if (t < T) {
      const int64_t tok = (static_cast<int64_t>(b) * T + t) * H + h;
      kv = to_f(k[tok * kDk + c]);
      qv = to_f(q[tok * kDk + c]) * scale;
      gv = g[tok * kDk + c];
      if (c < dv) vv = to_f(v[tok * dv + c]);
    }
    kt[c * kPad + i] = kv;
    qt[c * kPad + i] = qv;
    gt[c * kPad + i] = gv;
    xu[i * kXs + c] = vv;
  }
  if (tid < kC) bs[tid] = t0 + tid < T ? beta[(static_cast<int64_t>(b) * T + t0 + tid) * H + h] : 0.f;
  __syncthreads();
  if (tid < kDk) {
    float cum = 0.f;
    for (int i = 0; i < kC; ++i) gt[tid * kPad + i] = (cum += gt[tid * kPad + i]);
  }
  __syncthreads();

  // Akk_ij = sum_c k_ic k_jc exp(G_ic - G_jc) (j < i), Aqk likewise with q (j <= i). The decay
  // ratio is formed as one exp of a non-positive difference: exp(G) and exp(-G) separately would
  // overflow FP32 within a chunk when g reaches K3's bound of -5 per token.
  // Lanes run along i: kt/gt/qt rows i are consecutive in shared memory, and Aqk^T is written
  // coalesced.
  const int i = tid % kC;
  for (int j = tid / kC; j < kC; j += kIntraThreads / kC) {
    float sk = 0.f, sq = 0.f;
    if (j <= i) {
      for (int cc = 0; cc < kDk; ++cc) {
        const float e = __expf(gt[cc * kPad + i] - gt[cc * kPad + j]) * kt[cc * kPad + j];
        sk += kt[cc * kPad + i] * e;
        sq += qt[cc * kPad + i] * e;
      }
    }
    akk[i * kPad + j] = j < i ? sk : 0.f;
    ws.aqk_t[(bh * tp + t0) * kC + j * kC + i] = sq;
  }
  for (int e = tid; e < kC * kDk; e += kIntraThreads) {
    const int r = e / kDk, c = e % kDk;  // row-major outputs
    const float gr = gt[c * kPad + r];
    ws.kg[(bh * tp + t0 + r) * kDk + c] = kt[c * kPad + r] * __expf(gt[c * kPad + kC - 1] - gr);
    xw[r * kXs + c] = kt[c * kPad + r] * __expf(gr);
    const int ct = e / kC, rt = e % kC;  // transposed output
    ws.qg_t[(bh * tp + t0) * kDk + ct * kC + rt] = qt[ct * kPad + rt] * __expf(gt[ct * kPad + rt]);
  }
  if (tid < kDk) ws.gl[(bh * num_c + n) * kDk + tid] = __expf(gt[tid * kPad + kC - 1]);
  __syncthreads();

  // UT transform by forward substitution, X_i = beta_i (R_i - sum_{j<i} Akk_ij X_j), for the 128
  // columns of W (R = Gamma K) and the dv columns of U (R = V) at once: two adjacent lanes per
  // column split the sum over j by parity.
  const int col = tid / 2, par = tid % 2;
  const bool is_u = col >= kDk;
  const int c = is_u ? col - kDk : col;
  const bool active = !is_u || c < dv;
  float* x = is_u ? xu : xw;
  for (int r = 0; r < kC; ++r) {
    float part = 0.f;
    if (active) {
      for (int jj = par; jj < r; jj += 2) part += akk[r * kPad + jj] * x[jj * kXs + c];
    }
    part += __shfl_xor_sync(0xffffffffu, part, 1);
    if (active && par == 0) {
      const float xr = bs[r] * (x[r * kXs + c] - part);
      x[r * kXs + c] = xr;
      if (is_u) ws.u[(bh * tp + t0 + r) * dv + c] = xr;
    }
    __syncwarp();  // row r of X before the partner lane reads it
  }
  __syncthreads();
  for (int e = tid; e < kC * kDk; e += kIntraThreads) {  // W transposed, coalesced
    const int ct = e / kC, rt = e % kC;
    ws.w_t[(bh * tp + t0) * kDk + ct * kC + rt] = xw[rt * kXs + ct];
  }
}

__device__ __forceinline__ void load_tile(float* dst, const float* __restrict__ src, int count, int tid, int nthreads) {
  const auto* s4 = reinterpret_cast<const float4*>(src);
  auto* d4 = reinterpret_cast<float4*>(dst);
  for (int e = tid; e < count / 4; e += nthreads) d4[e] = s4[e];
}

// One block per (32 value columns, head, batch), 256 threads; chunks in sequence. Per chunk:
// D = U - W S, O = (Gamma Q) S + Aqk D, S <- Diag(exp(G_last)) S + Kg^T D. Thread (rg, cg) owns
// a 4 x 2 tile of D and O (rows 4 rg.., columns 2 cg..) and an 8 x 2 tile of S.
__global__ void __launch_bounds__(256)
    kda_inter_kernel(int T, int H, int dv, int num_c, FwdWorkspace ws, bf16_bits* __restrict__ o) {
  extern __shared__ float sm[];
  float* st = sm;                      // [dk][32] state slice
  float* buf = st + kDk * kInterCols;  // W^T [dk][C], then (Gamma Q)^T [dk][C], then Kg [C][dk]
  float* aq = buf + kC * kDk;          // Aqk^T [C][C]
  float* dl = aq + kC * kC;            // [C][32] D
  const int cb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, cg = tid % 16, rg = tid / 16;
  const int d0 = cb * kInterCols, dc = 2 * cg;
  const int64_t tp = static_cast<int64_t>(num_c) * kC;
  const int64_t bh = static_cast<int64_t>(b) * H + h;
  for (int e = tid; e < kDk * kInterCols; e += 256) st[e] = 0.f;

  for (int n = 0; n < num_c; ++n) {
    const int64_t row0 = bh * tp + static_cast<int64_t>(n) * kC;
    __syncthreads();
    load_tile(buf, ws.w_t + row0 * kDk, kC * kDk, tid, 256);
    __syncthreads();
    float acc[4][2];
    for (int r = 0; r < 4; ++r) {
      const float2 u2 = *reinterpret_cast<const float2*>(&ws.u[(row0 + rg * 4 + r) * dv + d0 + dc]);
      acc[r][0] = u2.x;
      acc[r][1] = u2.y;
    }
    for (int cc = 0; cc < kDk; ++cc) {
      const float4 w4 = *reinterpret_cast<const float4*>(&buf[cc * kC + rg * 4]);
      const float2 s2 = *reinterpret_cast<const float2*>(&st[cc * kInterCols + dc]);
      const float wr[4] = {w4.x, w4.y, w4.z, w4.w};
      for (int r = 0; r < 4; ++r) {
        acc[r][0] -= wr[r] * s2.x;
        acc[r][1] -= wr[r] * s2.y;
      }
    }
    for (int r = 0; r < 4; ++r)
      *reinterpret_cast<float2*>(&dl[(rg * 4 + r) * kInterCols + dc]) = make_float2(acc[r][0], acc[r][1]);
    __syncthreads();
    load_tile(buf, ws.qg_t + row0 * kDk, kC * kDk, tid, 256);
    load_tile(aq, ws.aqk_t + row0 * kC, kC * kC, tid, 256);
    __syncthreads();
    for (int r = 0; r < 4; ++r) acc[r][0] = acc[r][1] = 0.f;
    for (int cc = 0; cc < kDk; ++cc) {
      const float4 q4 = *reinterpret_cast<const float4*>(&buf[cc * kC + rg * 4]);
      const float2 s2 = *reinterpret_cast<const float2*>(&st[cc * kInterCols + dc]);
      const float qr[4] = {q4.x, q4.y, q4.z, q4.w};
      for (int r = 0; r < 4; ++r) {
        acc[r][0] += qr[r] * s2.x;
        acc[r][1] += qr[r] * s2.y;
      }
    }
    for (int jj = 0; jj < rg * 4 + 4; ++jj) {  // Aqk^T is zero above the diagonal
      const float4 a4 = *reinterpret_cast<const float4*>(&aq[jj * kC + rg * 4]);
      const float2 d2 = *reinterpret_cast<const float2*>(&dl[jj * kInterCols + dc]);
      const float ar[4] = {a4.x, a4.y, a4.z, a4.w};
      for (int r = 0; r < 4; ++r) {
        acc[r][0] += ar[r] * d2.x;
        acc[r][1] += ar[r] * d2.y;
      }
    }
    for (int r = 0; r < 4; ++r) {
      const int t = n * kC + rg * 4 + r;
      if (t >= T) continue;
      bf16_bits* dst = o + ((static_cast<int64_t>(b) * T + t) * H + h) * dv + d0 + dc;
      dst[0] = to_bf(acc[r][0]);
      dst[1] = to_bf(acc[r][1]);
    }
    __syncthreads();
    load_tile(buf, ws.kg + row0 * kDk, kC * kDk, tid, 256);
    __syncthreads();
    float sacc[8][2];
    for (int r = 0; r < 8; ++r) {
      const int cc = rg * 8 + r;
      const float gl = ws.gl[(bh * num_c + n) * kDk + cc];
      sacc[r][0] = st[cc * kInterCols + dc] * gl;
      sacc[r][1] = st[cc * kInterCols + dc + 1] * gl;
    }
    for (int i = 0; i < kC; ++i) {
      const float4 ka = *reinterpret_cast<const float4*>(&buf[i * kDk + rg * 8]);
      const float4 kb = *reinterpret_cast<const float4*>(&buf[i * kDk + rg * 8 + 4]);
      const float2 d2 = *reinterpret_cast<const float2*>(&dl[i * kInterCols + dc]);
      const float kr[8] = {ka.x, ka.y, ka.z, ka.w, kb.x, kb.y, kb.z, kb.w};
      for (int r = 0; r < 8; ++r) {
        sacc[r][0] += kr[r] * d2.x;
        sacc[r][1] += kr[r] * d2.y;
      }
    }
    for (int r = 0; r < 8; ++r) {
      *reinterpret_cast<float2*>(&st[(rg * 8 + r) * kInterCols + dc]) = make_float2(sacc[r][0], sacc[r][1]);
    }
  }
}

// Sum over the warp (all lanes get it) of each of the warp's column partials.
__device__ __forceinline__ void warp_allsum(float (&x)[kBwdWarpCols]) {
  for (int off = 16; off > 0; off >>= 1) {
    for (int e = 0; e < kBwdWarpCols; ++e) x[e] += __shfl_xor_sync(0xffffffffu, x[e], off);
  }
}

// A segment's inputs in shared memory: loading kSeg tokens at once puts one global-memory
// latency per segment, not one per token, on the sequential path.
struct SegmentInputs {
  float* k;      // [kSeg][dk]
  float* alpha;  // [kSeg][dk] exp(g)
  float* q;      // [kSeg][dk]
  float* v;      // [kSeg][kBwdCols] this block's value columns
  float* d_o;    // [kSeg][kBwdCols]
  float* beta;   // [kSeg]
};

// Loads tokens ts..te-1 (q and d_o only when given). Synchronises the block before and after.
__device__ __forceinline__ void stage_segment(const SegmentInputs& si, int ts, int te, int b, int T, int H, int dv,
                                              int col0, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                                              const bf16_bits* __restrict__ v, const float* __restrict__ g,
                                              const float* __restrict__ beta, const bf16_bits* __restrict__ d_o) {
  __syncthreads();
  const int n = te - ts;
  for (int e = threadIdx.x; e < n * kDk; e += blockDim.x) {
    const int i = e / kDk, c = e % kDk;
    const int64_t x = ((static_cast<int64_t>(b) * T + ts + i) * H + blockIdx.y) * kDk + c;
    si.k[e] = to_f(k[x]);
    si.alpha[e] = __expf(g[x]);
    if (q) si.q[e] = to_f(q[x]);
  }
  for (int e = threadIdx.x; e < n * kBwdCols; e += blockDim.x) {
    const int i = e / kBwdCols, d = e % kBwdCols;
    const int64_t x = ((static_cast<int64_t>(b) * T + ts + i) * H + blockIdx.y) * dv + col0 + d;
    si.v[e] = to_f(v[x]);
    if (d_o) si.d_o[e] = to_f(d_o[x]);
  }
  if (threadIdx.x < n) si.beta[threadIdx.x] = beta[(static_cast<int64_t>(b) * T + ts + threadIdx.x) * H + blockIdx.y];
  __syncthreads();
}

// One block per (32 value columns, head, batch), 8 warps; warp w owns 4 columns and all 128 state
// rows (lane l: rows l, l + 32, l + 64, l + 96), so the sums over rows are warp shuffles and the
// steps need no block barrier. Pass 1 runs the recurrence and stores the state every kSeg tokens;
// pass 2 walks segments backwards, replays each from its checkpoint (S' = Diag(alpha) S_{t-1}
// kept in shared memory, delta and v - S'^T k in registers), then back-propagates through it:
//   dS += scale q do^T; dq = scale (S' + k delta^T) do; ddelta = dS^T k; dv = beta ddelta;
//   dbeta = ddelta . (v - S'^T k); dp = -beta ddelta; dk = dS delta + S' dp;
//   dS' = dS + k dp^T; dg = rowsum(dS' o S'); dS <- Diag(alpha) dS'.
// dq, dk, dg and dbeta are summed over the block's warps in shared memory and written per
// column block into `part`; a second kernel adds the column blocks (no global atomics).
__global__ void __launch_bounds__(256, 2)
    kda_bwd_kernel(int T, int H, int dv, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                   const bf16_bits* __restrict__ v, const float* __restrict__ g, const float* __restrict__ beta,
                   const bf16_bits* __restrict__ d_o, float scale, float* __restrict__ dvv, float* __restrict__ ckpt,
                   float* __restrict__ part) {
  extern __shared__ float sm[];
  float* hist = sm;                                   // [8 warps][kSeg][4 cols][dk] S'
  float* acc = hist + 8 * kSeg * kBwdWarpCols * kDk;  // [kSeg][3][dk] dq, dk, dg over the warps
  float* acc_beta = acc + kSeg * 3 * kDk;             // [kSeg]
  SegmentInputs si;
  si.k = acc_beta + kSeg;
  si.alpha = si.k + kSeg * kDk;
  si.q = si.alpha + kSeg * kDk;
  si.v = si.q + kSeg * kDk;
  si.d_o = si.v + kSeg * kBwdCols;
  si.beta = si.d_o + kSeg * kBwdCols;
  const int cb = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int col0 = cb * kBwdCols, wc = warp * kBwdWarpCols;
  const int num_seg = (T + kSeg - 1) / kSeg;
  float* my_ckpt = ckpt + ((static_cast<int64_t>(b) * H + h) * gridDim.x + cb) * num_seg * kBwdCols * kDk;
  float* my_hist = hist + warp * kSeg * kBwdWarpCols * kDk;
  const int64_t plane = static_cast<int64_t>(gridDim.z) * T * H;  // tokens in one gradient plane
  float* my_part = part + cb * (3 * plane * kDk + plane);
  auto tok = [&](int t) { return (static_cast<int64_t>(b) * T + t) * H + h; };
  auto ck = [&](int seg, int e, int j) {
    return (static_cast<int64_t>(seg) * kBwdCols + wc + e) * kDk + lane + 32 * j;
  };

  float s[kLaneRows][kBwdWarpCols] = {};
  for (int seg = 0; seg < num_seg; ++seg) {
    const int ts = seg * kSeg, te = min(T, ts + kSeg);
    for (int j = 0; j < kLaneRows; ++j) {
      for (int e = 0; e < kBwdWarpCols; ++e) my_ckpt[ck(seg, e, j)] = s[j][e];
    }
    stage_segment(si, ts, te, b, T, H, dv, col0, nullptr, k, v, g, beta, nullptr);
    for (int i = 0; i < te - ts; ++i) {
      float kc[kLaneRows], p[kBwdWarpCols] = {};
      for (int j = 0; j < kLaneRows; ++j) {
        kc[j] = si.k[i * kDk + lane + 32 * j];
        const float al = si.alpha[i * kDk + lane + 32 * j];
        for (int e = 0; e < kBwdWarpCols; ++e) {
          s[j][e] *= al;
          p[e] += s[j][e] * kc[j];
        }
      }
      warp_allsum(p);
      const float bt = si.beta[i];
      for (int e = 0; e < kBwdWarpCols; ++e) {
        const float delta = bt * (si.v[i * kBwdCols + wc + e] - p[e]);
        for (int j = 0; j < kLaneRows; ++j) s[j][e] += kc[j] * delta;
      }
    }
  }

  float ds[kLaneRows][kBwdWarpCols] = {};
  for (int seg = num_seg - 1; seg >= 0; --seg) {
    const int ts = seg * kSeg, te = min(T, ts + kSeg), n = te - ts;
    for (int j = 0; j < kLaneRows; ++j) {
      for (int e = 0; e < kBwdWarpCols; ++e) s[j][e] = my_ckpt[ck(seg, e, j)];
    }
    stage_segment(si, ts, te, b, T, H, dv, col0, q, k, v, g, beta, d_o);
    for (int e = tid; e < kSeg * 3 * kDk + kSeg; e += blockDim.x) acc[e] = 0.f;  // acc_beta follows acc
    __syncthreads();
    float dl[kSeg][kBwdWarpCols], vp[kSeg][kBwdWarpCols];
#pragma unroll
    for (int i = 0; i < kSeg; ++i) {
      if (i >= n) break;
      float kc[kLaneRows], p[kBwdWarpCols] = {};
      for (int j = 0; j < kLaneRows; ++j) {
        kc[j] = si.k[i * kDk + lane + 32 * j];
        const float al = si.alpha[i * kDk + lane + 32 * j];
        for (int e = 0; e < kBwdWarpCols; ++e) {
          s[j][e] *= al;
          my_hist[(i * kBwdWarpCols + e) * kDk + lane + 32 * j] = s[j][e];
          p[e] += s[j][e] * kc[j];
        }
      }
      warp_allsum(p);
      const float bt = si.beta[i];
      for (int e = 0; e < kBwdWarpCols; ++e) {
        vp[i][e] = si.v[i * kBwdCols + wc + e] - p[e];
        dl[i][e] = bt * vp[i][e];
        for (int j = 0; j < kLaneRows; ++j) s[j][e] += kc[j] * dl[i][e];
      }
    }
#pragma unroll
    for (int i = kSeg - 1; i >= 0; --i) {
      if (i >= n) continue;
      float kc[kLaneRows], qc[kLaneRows], al[kLaneRows], dov[kBwdWarpCols], sp[kLaneRows][kBwdWarpCols];
      for (int e = 0; e < kBwdWarpCols; ++e) dov[e] = si.d_o[i * kBwdCols + wc + e];
      float dd[kBwdWarpCols] = {}, dqp[kLaneRows] = {};
      for (int j = 0; j < kLaneRows; ++j) {
        kc[j] = si.k[i * kDk + lane + 32 * j];
        qc[j] = si.q[i * kDk + lane + 32 * j];
        al[j] = si.alpha[i * kDk + lane + 32 * j];
        for (int e = 0; e < kBwdWarpCols; ++e) {
          sp[j][e] = my_hist[(i * kBwdWarpCols + e) * kDk + lane + 32 * j];
          ds[j][e] += scale * qc[j] * dov[e];
          dqp[j] += (sp[j][e] + kc[j] * dl[i][e]) * dov[e];
          dd[e] += ds[j][e] * kc[j];
        }
      }
      warp_allsum(dd);
      const float bt = si.beta[i];
      float db = 0.f;
      for (int e = 0; e < kBwdWarpCols; ++e) db += dd[e] * vp[i][e];
      for (int j = 0; j < kLaneRows; ++j) {
        float dkp = 0.f, dgp = 0.f;
        for (int e = 0; e < kBwdWarpCols; ++e) {
          const float dp = -bt * dd[e];
          dkp += ds[j][e] * dl[i][e] + sp[j][e] * dp;
          const float dsp = ds[j][e] + kc[j] * dp;
          dgp += dsp * sp[j][e];
          ds[j][e] = al[j] * dsp;
        }
        const int row = lane + 32 * j;
        atomicAdd(&acc[(i * 3 + 0) * kDk + row], scale * dqp[j]);
        atomicAdd(&acc[(i * 3 + 1) * kDk + row], dkp);
        atomicAdd(&acc[(i * 3 + 2) * kDk + row], dgp);
      }
      if (lane == 0) {
        atomicAdd(&acc_beta[i], db);
        for (int e = 0; e < kBwdWarpCols; ++e) dvv[tok(ts + i) * dv + col0 + wc + e] = bt * dd[e];
      }
    }
    __syncthreads();
    for (int e = tid; e < n * 3 * kDk; e += blockDim.x) {
      const int i = e / (3 * kDk), which = (e / kDk) % 3, row = e % kDk;
      my_part[which * plane * kDk + tok(ts + i) * kDk + row] = acc[e];
    }
    if (tid < n) my_part[3 * plane * kDk + tok(ts + tid)] = acc_beta[tid];
  }
}

// Adds the column blocks' partial gradients: dq, dk, dg [tokens][dk] and dbeta [tokens].
__global__ void kda_bwd_sum_kernel(int64_t plane, int num_cb, const float* __restrict__ part, float* __restrict__ dq,
                                   float* __restrict__ dk, float* __restrict__ dg, float* __restrict__ dbeta) {
  const int64_t per_cb = 3 * plane * kDk + plane;
  for (int64_t e = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; e < per_cb;
       e += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float sum = 0.f;
    for (int c = 0; c < num_cb; ++c) sum += part[c * per_cb + e];
    const int64_t which = e / (plane * kDk), off = e % (plane * kDk);
    if (which == 0) {
      dq[off] = sum;
    } else if (which == 1) {
      dk[off] = sum;
    } else if (which == 2) {
      dg[off] = sum;
    } else {
      dbeta[off] = sum;
    }
  }
}

}  // namespace

void kda_check_shape(const KdaShape& s) {
  if (s.batch < 1 || s.seq < 1 || s.heads < 1) throw std::invalid_argument("KDA: batch, seq and heads must be >= 1");
  if (s.head_dim_k != kDk) throw std::invalid_argument("KDA: head_dim_k must be 128");
  if (s.head_dim_v % kInterCols != 0 || s.head_dim_v < kInterCols || s.head_dim_v > kDk) {
    throw std::invalid_argument("KDA: head_dim_v must be a multiple of 32 in [32, 128]");
  }
  if (s.chunk != kC) throw std::invalid_argument("KDA: chunk must be 64");
  if (s.seq > (int64_t{1} << 30) || s.heads > 65535 || s.batch > 65535)
    throw std::invalid_argument("KDA: shape too large");
}

size_t kda_forward_workspace_bytes(const KdaShape& s) {
  kda_check_shape(s);
  const int64_t tp = num_chunks(s) * kC, bh = s.batch * s.heads;
  const int64_t floats = bh * tp * (3 * kDk + s.head_dim_v + kC) + bh * num_chunks(s) * kDk;
  return static_cast<size_t>(floats) * sizeof(float);
}

void kda_forward(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                 const float* beta, float scale, bf16_bits* o, void* workspace, cudaStream_t stream) {
  kda_check_shape(s);
  const FwdWorkspace ws = split_fwd(s, workspace);
  const int nc = static_cast<int>(num_chunks(s));
  const int t = static_cast<int>(s.seq), h = static_cast<int>(s.heads), dv = static_cast<int>(s.head_dim_v);
  const size_t intra_smem = kIntraSmemFloats * sizeof(float);
  const size_t inter_smem = kInterSmemFloats * sizeof(float);
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kda_intra_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(intra_smem)));
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kda_inter_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(inter_smem)));
  kda_intra_kernel<<<dim3(nc, h, static_cast<unsigned>(s.batch)), kIntraThreads, intra_smem, stream>>>(
      t, h, dv, q, k, v, g, beta, scale, ws);
  MOESIM_LAUNCH_CHECK();
  kda_inter_kernel<<<dim3(dv / kInterCols, h, static_cast<unsigned>(s.batch)), 256, inter_smem, stream>>>(t, h, dv, nc,
                                                                                                          ws, o);
  MOESIM_LAUNCH_CHECK();
}

size_t kda_backward_workspace_bytes(const KdaShape& s) {
  kda_check_shape(s);
  const int64_t num_seg = (s.seq + kSeg - 1) / kSeg, num_cb = s.head_dim_v / kBwdCols;
  const int64_t tokens = s.batch * s.seq * s.heads;
  const int64_t ckpt = s.batch * s.heads * num_cb * num_seg * kBwdCols * kDk;
  const int64_t part = num_cb * (3 * tokens * kDk + tokens);
  return static_cast<size_t>(ckpt + part) * sizeof(float);
}

void kda_backward(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                  const float* beta, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv, float* dg,
                  float* dbeta, void* workspace, cudaStream_t stream) {
  kda_check_shape(s);
  const int64_t num_seg = (s.seq + kSeg - 1) / kSeg, num_cb = s.head_dim_v / kBwdCols;
  const int64_t tokens = s.batch * s.seq * s.heads;
  float* ckpt = static_cast<float*>(workspace);
  float* part = ckpt + s.batch * s.heads * num_cb * num_seg * kBwdCols * kDk;
  const size_t smem = kBwdSmemFloats * sizeof(float);
  MOESIM_CUDA_CHECK(
      cudaFuncSetAttribute(kda_bwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  const int dvi = static_cast<int>(s.head_dim_v);
  kda_bwd_kernel<<<dim3(static_cast<unsigned>(num_cb), static_cast<unsigned>(s.heads), static_cast<unsigned>(s.batch)),
                   256, smem, stream>>>(static_cast<int>(s.seq), static_cast<int>(s.heads), dvi, q, k, v, g, beta, d_o,
                                        scale, dv, ckpt, part);
  MOESIM_LAUNCH_CHECK();
  kda_bwd_sum_kernel<<<1024, 256, 0, stream>>>(tokens, static_cast<int>(num_cb), part, dq, dk, dg, dbeta);
  MOESIM_LAUNCH_CHECK();
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
