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
// Forward (chunked, as the reference kernels): an intra-chunk kernel, parallel over chunks, forms
// the decay-weighted Aqk and Akk, solves the UT transform by forward substitution (FP32) and writes
// W = M (Gamma K), U = M V; an inter-chunk kernel carries the state across chunks, split over
// 32-wide column slices of the value dimension (columns of S evolve independently).
// Backward: a recurrent kernel per (batch, head, 32 value columns), one warp per 4 columns and all
// 128 state rows (row sums are warp shuffles, no block barrier per token): a forward pass stores
// the state every 4 tokens, then segments are replayed in reverse (S' in shared memory) while dS is
// carried back; dq, dk, dg, dbeta are summed over the warps in shared memory, written per column
// block, and added by a second kernel. Workspace at K3 shapes (T 8192, 96 heads): ~18 GB.
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
