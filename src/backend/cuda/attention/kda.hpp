// SPDX-License-Identifier: MIT
// KDA (Kimi Delta Attention) core: the gated delta rule with a per-channel decay, Kimi Linear
// (arXiv 2510.26692; docs/modelling.md#kda). Per batch b, head h, with state S (dk x dv, zero at
// t = 0):
//   S_t = (I - beta_t k_t k_t^T) Diag(exp(g_t)) S_{t-1} + beta_t k_t v_t^T,   o_t = scale * S_t^T q_t
// q and k are expected L2-normalised (the short conv, SiLU and normalisation are separate ops);
// g_t <= 0 is the log of the decay alpha_t (per channel), beta_t in (0, 1) one scalar per head.
//
// Layouts: q, k [B, T, H, dk] BF16; v [B, T, H, dv] BF16; g [B, T, H, dk] FP32; beta [B, T, H]
// FP32; o, do [B, T, H, dv] BF16. Gradients FP32 in the layout of their input.
// Supported: dk == 128, dv a multiple of 32 up to 128, chunk == 64.
//
// Requires g >= -5 per token (K3's bound, as flash-linear-attention's chunk_kda lower bound): the
// decay factors inside a 16-token sub-chunk reach exp(15 * 5) and must stay below FP32's 3.4e38.
//
// Both directions are chunked (chunk C = 64; Gamma = Diag(exp(G)), G the cumulative log decay in
// the chunk; Akk_ij = sum_c k_ic k_jc exp(G_ic - G_jc) for j < i, Aqk likewise with scale q for
// j <= i; T = (I + Diag(beta) Akk)^-1, the UT transform; S the state entering the chunk):
//   W = T Diag(beta) Gamma K,  U = T Diag(beta) V,  D = U - W S,
//   O = (Gamma Q) S + Aqk D,   S <- Diag(exp(G_last)) S + Kg^T D,  Kg = K exp(G_last - G).
// Every product runs on tensor cores (WMMA 16x16x16, BF16 operands, FP32 accumulation); the
// decay-weighted ones split exp(G_i - G_j) at the first row of the query's 16-token sub-chunk
// (the last row of the key's, for key-side sums) so that neither factor overflows. Kernels
// (kda.cu, kda_backward.cu; kda_chunk.cuh holds what they share):
//   prep    per chunk:  Aqk, Akk, T (by 16 x 16 blocks in FP32), W, U, Gamma Q, Kg, exp(G_last);
//   state   across chunks, per 32 value columns (columns of S evolve independently): D, O, S;
//   dstate  the same in reverse: dD = Aqk^T dO + Kg dS, dS <- Diag(exp(G_last)) dS + (Gamma Q)^T dO - W^T dD;
//   grad1   per chunk:  dv, dbeta, dAkk, dAqk and the state-side gradient terms;
//   grad2   per chunk:  the decay-weighted sums, then dq, dk and dg (reverse cumsum of dG).
// The forward runs prep and state; the backward runs prep and state again (storing the state
// entering each chunk, BF16, and D), then dstate, grad1, grad2; the formulas are beside grad1 in
// kda_backward.cu. Workspace at K3 shapes (T 8192, 96 heads, dv 128): forward 1.21 GB (the prep
// products), backward 2.23 GB (those plus the chunk-entry states and their gradients in BF16, and dD).
// Measured on one H200 at those shapes: 4.78 ms forward, 13.18 ms backward (docs/calibration/attention.md).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/attention_common.hpp"

namespace moesim::cuda {

struct KdaShape {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim_k = 128;
  int64_t head_dim_v = 128;
  int64_t chunk = 64;
};

// Throws std::invalid_argument for shapes the kernels do not support.
void kda_check_shape(const KdaShape& s);

size_t kda_forward_workspace_bytes(const KdaShape& s);
void kda_forward(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                 const float* beta, float scale, bf16_bits* o, void* workspace, cudaStream_t stream);

size_t kda_backward_workspace_bytes(const KdaShape& s);
// Writes every gradient (no accumulation into existing values).
void kda_backward(const KdaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* g,
                  const float* beta, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv, float* dg,
                  float* dbeta, void* workspace, cudaStream_t stream);

// FLOPs per head and token, forward: 6 dh^2 + 3 C dh + C^2 (docs/modelling.md#kda, dh = dk);
// backward counted as twice the forward, as the simulator's graph does.
KernelCost kda_forward_cost(const KdaShape& s);
KernelCost kda_backward_cost(const KdaShape& s);

}  // namespace moesim::cuda
