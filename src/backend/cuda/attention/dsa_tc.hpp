// SPDX-License-Identifier: MIT
// Internal: tensor-core (WMMA, BF16 in, FP32 accumulate) variants of the DSA indexer and sparse
// attention kernels, launched by dsa.cu. Same contracts as dsa_sparse_forward / dsa_sparse_backward, plus
// heads a multiple of 32.
#pragma once

#include <cstdint>

#include "backend/cuda/attention/dsa.hpp"

namespace moesim::cuda::dsa_tc {

inline constexpr int kHeadGroup = 32;  // heads per block: the M dimension of the score GEMMs

// Lightning indexer scores (contract of dsa_indexer_scores; any head count, head dim 128).
void indexer_scores(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w, float* scores,
                    cudaStream_t stream);

// Its gradient (contract of dsa_indexer_backward); FP32 gradient weights enter the GEMMs as two
// BF16 terms (hi + lo).
void indexer_backward(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w,
                      const float* d_scores, float* dq, float* dk, float* dw, cudaStream_t stream);

void sparse_forward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx, float scale,
                    bf16_bits* o, float* lse, cudaStream_t stream);
// dsum: rowsum(dO * O) per (b, t, h), already computed; dkv already zeroed.
void sparse_backward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                     const float* lse, const float* dsum, const bf16_bits* d_o, float scale, float* dq, float* dkv,
                     cudaStream_t stream);

}  // namespace moesim::cuda::dsa_tc
