// SPDX-License-Identifier: MIT
// DSA (DeepSeek Sparse Attention, docs/modelling.md#dsa): the lightning indexer, top-k key
// selection per query, and sparse MQA ("absorbed" MLA) attention over the selected latents.
//
// Indexer: scores [B, T, T] FP32, entry (t, s) = sum_j w(t, j) ReLU(q(t, j) . k(s)) for s <= t
// (entries above the diagonal are not written). q [B, T, Hi, di] BF16, k [B, T, di] BF16 (one
// indexer key per token, shared by the heads), w [B, T, Hi] FP32 (any constant scale folded in).
// BF16 here; the production indexer runs in FP8 after a Hadamard rotation (not done here).
// Supported: di == 128, any Hi.
// Top-k: idx [B, T, top_k] int32, the top_k causal keys of each query by score (ties broken
// arbitrarily), in no particular order; when t + 1 <= top_k every key s <= t is kept and the
// remaining slots are -1.
// Sparse attention reads only the first min(t + 1, top_k) slots of query t's list (where top-k puts
// the valid ones); a -1 among them is skipped. q [B, T, H, latent + rope] BF16 (q_nope absorbed
// into the latent space), kv [B, T, latent + rope] BF16 (the compressed latent and the rope key; the value is the first
// `latent` dims), idx as above; o, do [B, T, H, latent] BF16, lse [B, T, H] FP32.
// Supported: latent 512, rope 64, H a multiple of 16. Two variants (AttentionImpl): tensor_core
// (mma.sync BF16, a block per query and 32 heads, cp.async-gathered tiles of 64 keys forward and
// 32 backward, dsa_mma.cu; other head counts fall back to simt) and simt (FP32, 16 heads x 16
// keys). The indexer has both variants too (its tensor-core one: WMMA, dsa_tc.cu).
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/attention/attention_common.hpp"

namespace moesim::cuda {

struct DsaIndexerShape {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads = 64;
  int64_t head_dim = 128;
  int64_t top_k = 2048;
};

struct DsaAttentionShape {
  int64_t batch = 1;
  int64_t seq = 0;
  int64_t heads = 0;
  int64_t latent = 512;
  int64_t rope = 64;
  int64_t top_k = 2048;
};

void dsa_check_shape(const DsaIndexerShape& s);
void dsa_check_shape(const DsaAttentionShape& s);

// impl: tensor_core (default; WMMA 64 x 64 tiles per head) or simt.
void dsa_indexer_scores(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w, float* scores,
                        cudaStream_t stream, AttentionImpl impl = AttentionImpl::tensor_core);
// Gradients of sum(scores * d_scores) over causal entries: dq [B,T,Hi,di], dk [B,T,di],
// dw [B,T,Hi], FP32 (dk accumulated with atomics).
void dsa_indexer_backward(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w,
                          const float* d_scores, float* dq, float* dk, float* dw, cudaStream_t stream,
                          AttentionImpl impl = AttentionImpl::tensor_core);
void dsa_topk(const DsaIndexerShape& s, const float* scores, int32_t* idx, cudaStream_t stream);

// impl: tensor_core (default) needs heads % 32 == 0 (one pass, online softmax); other head counts
// run the SIMT kernel.
void dsa_sparse_forward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                        float scale, bf16_bits* o, float* lse, cudaStream_t stream,
                        AttentionImpl impl = AttentionImpl::tensor_core);
// Workspace: one FP32 per (batch, query, head) for rowsum(dO * O). dkv is accumulated with atomics
// (a key is selected by many queries; tensor_core: one FP32 vector reduction per 4 columns, per
// key and block of 32 heads).
size_t dsa_sparse_backward_workspace_bytes(const DsaAttentionShape& s);
void dsa_sparse_backward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                         const bf16_bits* o, const float* lse, const bf16_bits* d_o, float scale, float* dq, float* dkv,
                         void* workspace, cudaStream_t stream, AttentionImpl impl = AttentionImpl::tensor_core);

// Indexer: 2 * Hi * di FLOPs per causal pair (docs/modelling.md#dsa; the ReLU and weighting not
// counted), backward twice that. Top-k: no FLOPs, reads the causal scores and writes the indices.
// Sparse attention: 2 * H * (latent + rope + latent) per kept pair, backward twice that.
KernelCost dsa_indexer_cost(const DsaIndexerShape& s);
KernelCost dsa_indexer_backward_cost(const DsaIndexerShape& s);
KernelCost dsa_topk_cost(const DsaIndexerShape& s);
KernelCost dsa_sparse_forward_cost(const DsaAttentionShape& s);
KernelCost dsa_sparse_backward_cost(const DsaAttentionShape& s);

}  // namespace moesim::cuda
