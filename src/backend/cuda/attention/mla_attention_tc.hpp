// SPDX-License-Identifier: MIT
// Internal: the tensor-core (WMMA, BF16 in, FP32 accumulate) variants of the MLA attention
// kernels, launched by mla_attention.cu. Same contracts as mla_forward / mla_backward.
#pragma once

#include <cstdint>

#include "backend/cuda/attention/mla_attention.hpp"

namespace moesim::cuda::mla_tc {

void forward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale, bf16_bits* o,
             float* lse, cudaStream_t stream);
// dsum: rowsum(dO * O) per (b, h, t), already computed.
void backward(const MlaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const float* lse,
              const float* dsum, const bf16_bits* d_o, float scale, float* dq, float* dk, float* dv,
              cudaStream_t stream);

}  // namespace moesim::cuda::mla_tc
