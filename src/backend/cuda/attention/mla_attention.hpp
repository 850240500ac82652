// SPDX-License-Identifier: MIT
// MLA attention core: causal softmax attention with MLA's head dims (q/k: nope + rope = 192,
// v: 128 in K3), the op the graph calls flash_attention. The key/value projections (kv_b) and
// the shared rope key are expanded per head by the caller: k has as many heads as q.
//
// Layouts: q, k [B, T, H, dqk] BF16; v [B, T, H, dv] BF16; o, do [B, T, H, dv] BF16;
// lse [B, H, T] FP32 (natural log of the softmax denominator, scores already scaled).
// Supported (dqk, dv): (192, 128) and (128, 128).
//
// Two variants (AttentionImpl). tensor_core (default): WMMA BF16 tiles of 64 x 64 with FP32
// accumulation, a two-pass forward (lse, then P V) and FlashAttention-2's backward; see
// mla_attention_tc.cu. simt: FP32 flash-style, an online softmax over 32-key tiles, one block per
// 32 queries and head. Both backwards are two kernels without atomics (key-major for dk, dv;
// query-major for dq) recomputing P from lse.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/attention_common.hpp"

namespace moesim::cuda {

struct MlaShape {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t head_dim_qk = 192;
  int64_t head_dim_v = 128;
};

void mla_check_shape(const MlaShape& s);

void mla_forward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
                 float* lse, cudaStream_t stream, AttentionImpl impl = AttentionImpl::tensor_core);

// Workspace: one FP32 per (batch, head, query) for rowsum(dO * O).
size_t mla_backward_workspace_bytes(const MlaShape& s);
void mla_backward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const bf16_bits* o,
                  const float* lse, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv, void* workspace,
                  cudaStream_t stream, AttentionImpl impl = AttentionImpl::tensor_core);

// Forward FLOPs 2 * heads * (dqk + dv) per causal (query, key) pair, as the graph's
// flash_attention; backward twice that.
KernelCost mla_forward_cost(const MlaShape& s);
KernelCost mla_backward_cost(const MlaShape& s);

}  // namespace moesim::cuda
