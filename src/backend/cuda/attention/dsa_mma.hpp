// SPDX-License-Identifier: MIT
// Internal: DSA sparse attention on tensor cores with mma.sync m16n8k16 (BF16 in, FP32
// accumulate), launched by dsa.cu. Same contracts as dsa_sparse_forward / dsa_sparse_backward,
// plus heads a multiple of 32 (a block takes one query and 32 heads).
#pragma once

#include <cstdint>

#include "backend/cuda/attention/dsa.hpp"

namespace moesim::cuda::dsa_mma {

inline constexpr int kHeadGroup = 32;

void sparse_forward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx, float scale,
                    bf16_bits* o, float* lse, cudaStream_t stream);
// dsum: rowsum(dO * O) per (b, t, h), already computed; dkv already zeroed.
void sparse_backward(const DsaAttentionShape& s, const bf16_bits* q, const bf16_bits* kv, const int32_t* idx,
                     const float* lse, const float* dsum, const bf16_bits* d_o, float scale, float* dq, float* dkv,
                     cudaStream_t stream);

}  // namespace moesim::cuda::dsa_mma
