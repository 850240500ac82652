// SPDX-License-Identifier: MIT
// KDA chunked backward on tensor cores: the forward's preparation and state kernels recompute the
// per-chunk products and the state entering each chunk; a reverse state kernel carries dS across
// chunks; two kernels parallel over chunks form the gradients. See kda.hpp for the formulas.
#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/attention/kda_chunk.cuh"
#include "backend/cuda/check.hpp"

namespace moesim::cuda {
namespace kda_detail {
namespace {

using detail::to_bf;
using detail::warp_sum;

constexpr size_t kDstateSmemBytes = sizeof(float) * (kDk * kLdSf + kC * kLdSf + kDk) +
                                    sizeof(bf16) * (kDk * kLdS + 3 * kC * kLdK + kC * kLdC + 3 * kC * kLdS);

// One block per (32 value columns, head, batch), chunks in reverse. With dS the gradient of the
// state leaving chunk n (zero after the last):
//   dD = Aqk^T dO + Kg dS;  dS <- Diag(exp(G_last)) dS + (Gamma Q)^T dO - W^T dD.
// Writes dS (BF16) per chunk to dstates [bh * nc][dk][dv] and dD to dd [rows][dv].
// Tiles are fetched (cp.async) while the phase before them computes: A = {Aqk, Kg, dO} for dD,
// issued once the previous chunk's dD phase is done (dO into the other of two buffers: the dS
// phase still reads it), B = {Gamma Q, W, exp(G_last)} for dS, issued at the chunk's start.
__global__ void __launch_bounds__(kThreads, 2)
    kda_dstate_kernel(int T, int H, int dv, int nc, ChunkWs ws, const bf16_bits* __restrict__ d_o,
                      bf16_bits* __restrict__ dstates, bf16_bits* __restrict__ dd) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* sf = reinterpret_cast<float*>(smem);  // [dk][kLdSf] dS
  float* df = sf + kDk * kLdSf;                // [C][kLdSf] dD
  float* lam = df + kC * kLdSf;                // [dk]
  bf16* sb = reinterpret_cast<bf16*>(lam + kDk);  // [dk][kLdS] dS
  bf16* wt = sb + kDk * kLdS;                  // [C][kLdK] W
  bf16* kgt = wt + kC * kLdK;                  // [C][kLdK] Kg
  bf16* gqt = kgt + kC * kLdK;                 // [C][kLdK] Gamma Q
  bf16* aqt = gqt + kC * kLdK;                 // [C][kLdC] Aqk
  bf16* ndb = aqt + kC * kLdC;                 // [C][kLdS] -dD
  bf16* dobuf = ndb + kC * kLdS;               // [2][C][kLdS] dO of chunk n in buffer n % 2
  const int h = blockIdx.y, bb = blockIdx.z, d0 = blockIdx.x * kSlice;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int64_t bh = static_cast<int64_t>(bb) * H + h;
  auto load_a = [&](int n) {
    const int64_t r0 = (bh * nc + n) * kC;
    const int t0 = n * kC;
    load_rows(aqt, kLdC, ws.aqk + r0 * kC, kC, kC, kC, kC);
    load_rows(kgt, kLdK, ws.kg + r0 * kDk, kDk, kC, kC, kDk);
    load_rows(dobuf + (n % 2) * kC * kLdS, kLdS, d_o + ((static_cast<int64_t>(bb) * T + t0) * H + h) * dv + d0,
              static_cast<int64_t>(H) * dv, kC, min(kC, T - t0), kSlice);
  };
  auto load_b = [&](int n) {
    const int64_t r0 = (bh * nc + n) * kC;
    load_rows(gqt, kLdK, ws.gq + r0 * kDk, kDk, kC, kC, kDk);
    load_rows(wt, kLdK, ws.w + r0 * kDk, kDk, kC, kC, kDk);
    load_rows(lam, kDk, ws.lam + (bh * nc + n) * kDk, kDk, 1, 1, kDk);
  };
  for (int e = tid; e < kDk * kSlice; e += kThreads) {
    sf[(e / kSlice) * kLdSf + e % kSlice] = 0.f;
    sb[(e / kSlice) * kLdS + e % kSlice] = as_bf(0.f);
  }
  load_a(nc - 1);
  cp_async_commit();
  const int tm = warp / 2, tn = warp % 2;
  for (int n = nc - 1; n >= 0; --n) {
    const int64_t row0 = (bh * nc + n) * kC;
    const bf16* dob = dobuf + (n % 2) * kC * kLdS;
    __syncthreads();  // the previous dS phase is done: Gamma Q, W, exp(G_last) and dS are free
    store_rows(dstates + (bh * nc + n) * kDk * dv + d0, dv, sb, kLdS, kDk, kSlice);
    load_b(n);
    cp_async_commit();
    cp_async_wait<1>();  // A (B may still be in flight)
    __syncthreads();
    {
      float* dt = df + tm * 16 * kLdSf + tn * 16;
      FragC acc;
      wmma::fill_fragment(acc, 0.f);
      mma_range<Col, Row>(acc, aqt, kLdC, dob, kLdS, tm, tn, kSub * tm, kC);  // Aqk_ji = 0 for j < i
      mma_range<Row, Row>(acc, kgt, kLdK, sb, kLdS, tm, tn, 0, kDk);
      wmma::store_matrix_sync(dt, acc, kLdSf, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int r = e / 16, cc = e % 16, i = tm * 16 + r, c = tn * 16 + cc;
        const float x = dt[r * kLdSf + cc];
        ndb[i * kLdS + c] = as_bf(-x);
        dd[(row0 + i) * dv + d0 + c] = to_bf(x);
      }
    }
    cp_async_wait<0>();  // B
    __syncthreads();     // dD is complete; Aqk, Kg and the other dO buffer are free
    if (n > 0) load_a(n - 1);
    cp_async_commit();
    decay_and_add(sf, sb, lam, warp, lane, [&](FragC& acc, int sm, int sn) {
      mma_range<Col, Row>(acc, gqt, kLdK, dob, kLdS, sm, sn, 0, kC);  // + (Gamma Q)^T dO
      mma_range<Col, Row>(acc, wt, kLdK, ndb, kLdS, sm, sn, 0, kC);   // - W^T dD
    });
  }
}

constexpr size_t kGrad1SmemBytes =
    sizeof(float) * (2 * kC * kLdKf + kC) + sizeof(bf16) * (kC * kLdC + 4 * kC * kLdK + 2 * kDk * kLdK);

// Per-token gradients and partial sums ---------------------------------------------------------
// Per chunk, with S the state entering it, dS the gradient of the state leaving it, D and dD from
// the state kernels, Y = Diag(beta) R the right-hand side of the UT solve (R = V - Gamma K S):
//   dY = T^T dD;  dv = dR = Diag(beta) dY;  dbeta_i = dY_i . D_i / beta_i  (R_i - (Akk D)_i = D_i / beta_i);
//   dAkk = -(dR D^T) (j < i);  dAqk = dO D^T (j <= i);
//   d(Gamma Q) = dO S^T;  d(Gamma K) = -dR S^T;  dKg = D dS^T.
// (Derivation: the Lagrangian of (I + Diag(beta) Akk) D = Diag(beta) R.)
// With Qs = scale q, the gradients split into dQs, P (k as the query-side factor) and N (k as the
// key-side factor), dk = P + N, and the cumulative log decay gets dG = Qs dQs + k (P - N):
//   dQs = exp(G) d(Gamma Q) + sum_j dAqk_ij k_j exp(G_i - G_j)
//   P   = exp(G) d(Gamma K) + sum_j dAkk_ij k_j exp(G_i - G_j)
//   N   = exp(G_last - G) dKg + sum_i (dAqk_ij Qs_i + dAkk_ij k_i) exp(G_i - G_j)
//   dG_last = sum_i Kg_i dKg_i + exp(G_last) rowsum(S o dS);  dg_s = sum_{i >= s} dG_i + dG_last.
// Grad 1 (this kernel) writes dv, dbeta, dAkk and dAqk (over T and Aqk in the workspace), the first
// terms of dQs, P and N into dq, dk and dg (scratch until grad 2), and exp(G_last) rowsum(S o dS).
__global__ void __launch_bounds__(kThreads)
    kda_grad1_kernel(int T, int H, int dv, const float* __restrict__ g, const float* __restrict__ beta,
                     const bf16_bits* __restrict__ d_o, ChunkWs ws, const bf16_bits* __restrict__ states,
                     const bf16_bits* __restrict__ dstates, const bf16_bits* __restrict__ dd, float* __restrict__ dq,
                     float* __restrict__ dk, float* __restrict__ dg, float* __restrict__ dvv,
                     float* __restrict__ dbeta, float* __restrict__ dgl) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* G = reinterpret_cast<float*>(smem);   // [C][kLdKf]
  float* yf = G + kC * kLdKf;                  // [C][kLdKf] dY, then per-warp fragment copies
  float* bs = yf + kC * kLdKf;                 // [C]
  bf16* tb = reinterpret_cast<bf16*>(bs + kC);  // [C][kLdC] T
  bf16* ddb = tb + kC * kLdC;                  // [C][kLdK] dD
  bf16* db = ddb + kC * kLdK;                  // [C][kLdK] D
  bf16* dob = db + kC * kLdK;                  // [C][kLdK] dO
  bf16* drb = dob + kC * kLdK;                 // [C][kLdK] dR
  bf16* sb = drb + kC * kLdK;                  // [dk][kLdK] S
  bf16* dsb = sb + kDk * kLdK;                 // [dk][kLdK] dS
  const int n = blockIdx.x, h = blockIdx.y, bb = blockIdx.z, nc = gridDim.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int t0 = n * kC, valid = min(kC, T - t0);
  const int64_t bh = static_cast<int64_t>(bb) * H + h, cn = bh * nc + n;
  const int64_t row0 = cn * kC, tok0 = (static_cast<int64_t>(bb) * T + t0) * H + h;
  load_rows(G, kLdKf, g + tok0 * kDk, static_cast<int64_t>(H) * kDk, kC, valid, kDk);
  load_rows(tb, kLdC, ws.tm + row0 * kC, kC, kC, kC, kC);
  load_rows(ddb, kLdK, dd + row0 * dv, dv, kC, kC, dv);
  load_rows(dob, kLdK, d_o + tok0 * dv, static_cast<int64_t>(H) * dv, kC, valid, dv);
  load_rows(sb, kLdK, states + cn * kDk * dv, dv, kDk, kDk, dv);
  load_rows(dsb, kLdK, dstates + cn * kDk * dv, dv, kDk, kDk, dv);
  if (tid < kC) bs[tid] = tid < valid ? beta[tok0 + static_cast<int64_t>(tid) * H] : 0.f;
  // D (FP32) in registers for dbeta: warp w holds rows w, w + 8, ..., lane l columns 4 l .. 4 l + 3;
  // its BF16 copy goes to shared memory for the GEMMs.
  const int c0 = 4 * lane;
  float4 dreg[kC / kWarps];
  for (int r = 0; r < kC / kWarps; ++r) {
    const int i = warp + kWarps * r;
    dreg[r] = c0 < dv ? *reinterpret_cast<const float4*>(&ws.u[(row0 + i) * dv + c0]) : make_float4(0, 0, 0, 0);
  }
  for (int r = 0; r < kC / kWarps && c0 < dv; ++r) {
    bf16* d = db + (warp + kWarps * r) * kLdK + c0;
    d[0] = as_bf(dreg[r].x);
    d[1] = as_bf(dreg[r].y);
    d[2] = as_bf(dreg[r].z);
    d[3] = as_bf(dreg[r].w);
  }
  cumsum_rows(G);

  const int nt_v = dv / 16;
  for (int job = warp; job < 4 * nt_v; job += kWarps) {
    const int tm = job / nt_v, tn = job % nt_v;
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    mma_range<Col, Row>(acc, tb, kLdC, ddb, kLdK, tm, tn, kSub * tm, kC);  // T_ji = 0 for j < i
    wmma::store_matrix_sync(yf + tm * 16 * kLdKf + tn * 16, acc, kLdKf, wmma::mem_row_major);
  }
  __syncthreads();
  for (int r = 0; r < kC / kWarps; ++r) {
    const int i = warp + kWarps * r;
    const float bt = bs[i];
    float part = 0.f;
    if (c0 < dv) {
      const float4 y = *reinterpret_cast<const float4*>(&yf[i * kLdKf + c0]);
      part = y.x * dreg[r].x + y.y * dreg[r].y + y.z * dreg[r].z + y.w * dreg[r].w;
      bf16* d = drb + i * kLdK + c0;
      d[0] = as_bf(bt * y.x);
      d[1] = as_bf(bt * y.y);
      d[2] = as_bf(bt * y.z);
      d[3] = as_bf(bt * y.w);
      if (i < valid) {
        *reinterpret_cast<float4*>(&dvv[(tok0 + static_cast<int64_t>(i) * H) * dv + c0]) =
            make_float4(bt * y.x, bt * y.y, bt * y.z, bt * y.w);
      }
    }
    part = warp_sum(part);
    if (i < valid && lane == 0) dbeta[tok0 + static_cast<int64_t>(i) * H] = part / bt;
  }
  __syncthreads();

  float* sc = yf + warp * 256;
  for (int job = warp; job < 32; job += kWarps) {
    const int is_kk = job / 16, I = (job % 16) / 4, J = job % 4;
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    if (J <= I) mma_range<Row, Col>(acc, is_kk ? drb : dob, kLdK, db, kLdK, I, J, 0, dv);
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 256; e += 32) {
      const int i = kSub * I + e / 16, j = kSub * J + e % 16;
      if (is_kk) {
        ws.tm[(row0 + i) * kC + j] = to_bf(j < i ? -sc[e] : 0.f);
      } else {
        ws.aqk[(row0 + i) * kC + j] = to_bf(j <= i ? sc[e] : 0.f);
      }
    }
    __syncwarp();
  }

  for (int job = warp; job < 96; job += kWarps) {
    const int which = job / 32, tm = (job % 32) / 8, tn = job % 8;  // 0: d(Gamma Q), 1: d(Gamma K), 2: dKg
    FragC acc;
    wmma::fill_fragment(acc, 0.f);
    mma_range<Row, Col>(acc, which == 0 ? dob : which == 1 ? drb : db, kLdK, which == 2 ? dsb : sb, kLdK, tm, tn, 0,
                        dv);
    wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
    __syncwarp();
    float* out = which == 0 ? dq : which == 1 ? dk : dg;
    for (int e = lane; e < 256; e += 32) {
      const int i = tm * 16 + e / 16, c = tn * 16 + e % 16;
      if (i >= valid) continue;
      const float gi = G[i * kLdKf + c];
      const float x = which == 0 ? __expf(gi) * sc[e]
                      : which == 1 ? -__expf(gi) * sc[e]
                                   : __expf(G[(kC - 1) * kLdKf + c] - gi) * sc[e];
      out[(tok0 + static_cast<int64_t>(i) * H) * kDk + c] = x;
    }
    __syncwarp();
  }
  for (int c = warp; c < kDk; c += kWarps) {
    float part = 0.f;
    for (int j = lane; j < dv; j += 32) part += as_f(sb[c * kLdK + j]) * as_f(dsb[c * kLdK + j]);
    part = warp_sum(part);
    if (lane == 0) dgl[cn * kDk + c] = __expf(G[(kC - 1) * kLdKf + c]) * part;
  }
}

constexpr int kLdA = kDk + 8;  // FP32 accumulators [C][kLdA]: one holds two BF16 [C][kLdK] tiles later
constexpr size_t kGrad2SmemBytes = sizeof(float) * (kC * kLdKf + 3 * kC * kLdA + kWarps * 256 + kDk + kC) +
                                   sizeof(bf16) * (3 * kC * kLdK + 2 * kC * kLdC);

// Grad 2: the decay-weighted sums of dQs, P and N as GEMMs with the decay split at a reference row
// per sub-chunk (as in the preparation kernel: both factors bounded), then dq, dk and dg.
// Query-side sums (dQs, P) for row block I use a = 16 I: exp(G_i - G_a) after the GEMM, k_j
// exp(G_a - G_j) in it. Key-side sums (N) for row block J use b = 16 J + 15: exp(G_b - G_j)
// after, Qs_i exp(G_i - G_b) and k_i exp(G_i - G_b) in it (i >= 16 J).
__global__ void __launch_bounds__(kThreads)
    kda_grad2_kernel(int T, int H, const bf16_bits* __restrict__ q, const bf16_bits* __restrict__ k,
                     const float* __restrict__ g, float scale, ChunkWs ws, const float* __restrict__ dgl,
                     float* __restrict__ dq, float* __restrict__ dk, float* __restrict__ dg) {
  extern __shared__ __align__(128) unsigned char smem[];
  float* G = reinterpret_cast<float*>(smem);  // [C][kLdKf]
  float* aq = G + kC * kLdKf;                 // [C][kLdA] dQs, then Qs dQs + 2 k P, then dG
  float* ap = aq + kC * kLdA;                 // [C][kLdA] P, then two BF16 tiles
  float* an = ap + kC * kLdA;                 // [C][kLdA] N, then dk
  float* scratch = an + kC * kLdA;            // [warp][16 x 16]
  float* glast = scratch + kWarps * 256;      // [dk] dG_last
  float* adiag = glast + kDk;                 // [C] dAqk_ii
  bf16* qr = reinterpret_cast<bf16*>(adiag + kC);  // [C][kLdK] q
  bf16* kr = qr + kC * kLdK;                  // [C][kLdK] k
  bf16* cp = kr + kC * kLdK;                  // [C][kLdK] decayed copy of k
  bf16* dab = cp + kC * kLdK;                 // [C][kLdC] dAkk
  bf16* daqb = dab + kC * kLdC;               // [C][kLdC] dAqk
  bf16* qsc = reinterpret_cast<bf16*>(ap);    // [C][kLdK] over P once it is folded in
  bf16* ksc = qsc + kC * kLdK;
  const int n = blockIdx.x, h = blockIdx.y, bb = blockIdx.z, nc = gridDim.x;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int t0 = n * kC, valid = min(kC, T - t0);
  const int64_t bh = static_cast<int64_t>(bb) * H + h, cn = bh * nc + n;
  const int64_t row0 = cn * kC, tok0 = (static_cast<int64_t>(bb) * T + t0) * H + h;
  float* sc = scratch + warp * 256;
  load_rows(qr, kLdK, q + tok0 * kDk, static_cast<int64_t>(H) * kDk, kC, valid, kDk);
  load_rows(kr, kLdK, k + tok0 * kDk, static_cast<int64_t>(H) * kDk, kC, valid, kDk);
  load_rows(dab, kLdC, ws.tm + row0 * kC, kC, kC, kC, kC);
  load_rows(daqb, kLdC, ws.aqk + row0 * kC, kC, kC, kC, kC);
  const int64_t tok_ld = static_cast<int64_t>(H) * kDk;
  load_rows(G, kLdKf, g + tok0 * kDk, tok_ld, kC, valid, kDk);
  load_rows(aq, kLdA, dq + tok0 * kDk, tok_ld, kC, valid, kDk);
  load_rows(ap, kLdA, dk + tok0 * kDk, tok_ld, kC, valid, kDk);
  load_rows(an, kLdA, dg + tok0 * kDk, tok_ld, kC, valid, kDk);
  cumsum_rows(G);
  if (tid < kDk) {  // N holds exp(G_last - G) dKg so far: sum_i Kg_i dKg_i = sum_i k_i N_i
    float s = dgl[cn * kDk + tid];
    for (int i = 0; i < kC; ++i) s += as_f(kr[i * kLdK + tid]) * an[i * kLdA + tid];
    glast[tid] = s;
  }
  // The diagonal of dAqk goes to dq and dk apart, in FP32 (dQs_i += dAqk_ii k_i, N_i += dAqk_ii Qs_i),
  // and not into dG, where its two terms cancel exactly (exp(G_i - G_i) = 1 does not depend on
  // g): through the GEMMs they would cancel only to BF16 precision, which swamps dg when decay is
  // strong (dg is then small).
  if (tid < kC) {
    adiag[tid] = as_f(daqb[tid * kLdC + tid]);
    daqb[tid * kLdC + tid] = as_bf(0.f);
  }

  for (int I = 0; I < 4; ++I) {
    const int a = kSub * I, rows = kSub * (I + 1);
    for (int e = tid; e < rows * kDk; e += kThreads) {
      const int j = e / kDk, c = e % kDk;
      cp[j * kLdK + c] = as_bf(as_f(kr[j * kLdK + c]) * __expf(G[a * kLdKf + c] - G[j * kLdKf + c]));
    }
    __syncthreads();
    for (int job = warp; job < 16; job += kWarps) {
      const int is_kk = job / 8, tn = job % 8;
      FragC acc;
      wmma::fill_fragment(acc, 0.f);
      mma_range<Row, Row>(acc, is_kk ? dab : daqb, kLdC, cp, kLdK, I, tn, 0, rows);
      wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
      __syncwarp();
      float* dst = is_kk ? ap : aq;
      for (int e = lane; e < 256; e += 32) {
        const int i = a + e / 16, c = tn * 16 + e % 16;
        dst[i * kLdA + c] += sc[e] * __expf(G[i * kLdKf + c] - G[a * kLdKf + c]);
      }
      __syncwarp();
    }
    __syncthreads();
  }
  for (int e = tid; e < kC * kDk; e += kThreads) {
    const int i = e / kDk, c = e % kDk;
    const float dqs = aq[i * kLdA + c], p = ap[i * kLdA + c];
    if (i < valid) dq[(tok0 + static_cast<int64_t>(i) * H) * kDk + c] = scale * (dqs + adiag[i] * as_f(kr[i * kLdK + c]));
    aq[i * kLdA + c] = scale * as_f(qr[i * kLdK + c]) * dqs + 2.f * as_f(kr[i * kLdK + c]) * p;
    an[i * kLdA + c] += p;
  }
  __syncthreads();

  for (int J = 0; J < 4; ++J) {
    const int lo = kSub * J, bref = lo + kSub - 1, rows = kC - lo;
    for (int e = tid; e < rows * kDk; e += kThreads) {
      const int r = e / kDk, c = e % kDk, i = lo + r;
      const float d = __expf(G[i * kLdKf + c] - G[bref * kLdKf + c]);
      qsc[r * kLdK + c] = as_bf(scale * as_f(qr[i * kLdK + c]) * d);
      ksc[r * kLdK + c] = as_bf(as_f(kr[i * kLdK + c]) * d);
    }
    __syncthreads();
    {
      const int tn = warp;
      FragC acc;
      wmma::fill_fragment(acc, 0.f);
      // A(m = j, k = i - lo) = dA[i][j]: the Col view from row lo on.
      mma_range<Col, Row>(acc, daqb + lo * kLdC, kLdC, qsc, kLdK, J, tn, 0, rows);
      mma_range<Col, Row>(acc, dab + lo * kLdC, kLdC, ksc, kLdK, J, tn, 0, rows);
      wmma::store_matrix_sync(sc, acc, 16, wmma::mem_row_major);
      __syncwarp();
      for (int e = lane; e < 256; e += 32) {
        const int j = lo + e / 16, c = tn * 16 + e % 16;
        an[j * kLdA + c] += sc[e] * __expf(G[bref * kLdKf + c] - G[j * kLdKf + c]);
      }
    }
    __syncthreads();
  }
  // dk = P + N; dG = Qs dQs + k (P - N) = (Qs dQs + 2 k P) - k (P + N), all without the diagonal.
  for (int e = tid; e < kC * kDk; e += kThreads) {
    const int i = e / kDk, c = e % kDk;
    const float dkv = an[i * kLdA + c];
    if (i < valid) {
      dk[(tok0 + static_cast<int64_t>(i) * H) * kDk + c] = dkv + adiag[i] * scale * as_f(qr[i * kLdK + c]);
    }
    aq[i * kLdA + c] -= as_f(kr[i * kLdK + c]) * dkv;
  }
  __syncthreads();
  if (tid < kDk) {
    float run = glast[tid];
    for (int i = kC - 1; i >= 0; --i) {
      run += aq[i * kLdA + tid];
      if (i < valid) dg[(tok0 + static_cast<int64_t>(i) * H) * kDk + tid] = run;
    }
  }
}

struct BwdWs {
  ChunkWs chunk;
  bf16_bits* states;   // [bh * nc][dk][dv] the state entering each chunk
  bf16_bits* dstates;  // [bh * nc][dk][dv] the gradient of the state leaving each chunk
  bf16_bits* dd;       // [rows][dv] dD
  float* dgl;          // [bh * nc][dk] exp(G_last) rowsum(S o dS)
};

BwdWs split_bwd(const KdaShape& s, void* ws) {
  const int64_t cnk = s.batch * s.heads * num_chunks(s), rows = cnk * kC;
  BwdWs w{};
  w.chunk = split_chunk_ws(s, ws);
  w.states = reinterpret_cast<bf16_bits*>(static_cast<char*>(ws) + chunk_ws_bytes(s));
  w.dstates = w.states + cnk * kDk * s.head_dim_v;
  w.dd = w.dstates + cnk * kDk * s.head_dim_v;
  w.dgl = reinterpret_cast<float*>(w.dd + rows * s.head_dim_v);
  return w;
}

}  // namespace
}  // namespace kda_detail

size_t kda_backward_workspace_bytes(const KdaShape& s) {
  kda_check_shape(s);
  using namespace kda_detail;
  const int64_t cnk = s.batch * s.heads * num_chunks(s), rows = cnk * kC;
  const int64_t halves = 2 * cnk * kDk * s.head_dim_v + rows * s.head_dim_v;
  return chunk_ws_bytes(s) + static_cast<size_t>(halves) * sizeof(bf16_bits) +
         static_cast<size_t>(cnk * kDk) * sizeof(float);
}

void kda_backward(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                  const float* beta, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv, float* dg,
                  float* dbeta, void* workspace, cudaStream_t stream) {
  kda_check_shape(s);
  using namespace kda_detail;
  const BwdWs w = split_bwd(s, workspace);
  const int t = static_cast<int>(s.seq), h = static_cast<int>(s.heads), dvi = static_cast<int>(s.head_dim_v);
  const int nc = static_cast<int>(num_chunks(s));
  launch_prep(s, q, k, v, g, beta, scale, w.chunk, stream);
  launch_state(s, w.chunk, nullptr, w.states, stream);

  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kda_dstate_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kDstateSmemBytes)));
  kda_dstate_kernel<<<dim3(static_cast<unsigned>(dvi / kSlice), static_cast<unsigned>(h),
                           static_cast<unsigned>(s.batch)),
                      kThreads, kDstateSmemBytes, stream>>>(t, h, dvi, nc, w.chunk, d_o, w.dstates, w.dd);
  MOESIM_LAUNCH_CHECK();

  const dim3 per_chunk(static_cast<unsigned>(nc), static_cast<unsigned>(h), static_cast<unsigned>(s.batch));
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kda_grad1_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kGrad1SmemBytes)));
  kda_grad1_kernel<<<per_chunk, kThreads, kGrad1SmemBytes, stream>>>(t, h, dvi, g, beta, d_o, w.chunk, w.states,
                                                                     w.dstates, w.dd, dq, dk, dg, dv, dbeta, w.dgl);
  MOESIM_LAUNCH_CHECK();
  MOESIM_CUDA_CHECK(cudaFuncSetAttribute(kda_grad2_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(kGrad2SmemBytes)));
  kda_grad2_kernel<<<per_chunk, kThreads, kGrad2SmemBytes, stream>>>(t, h, q, k, g, scale, w.chunk, w.dgl, dq, dk,
                                                                     dg);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
