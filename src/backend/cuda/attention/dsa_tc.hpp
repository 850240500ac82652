// SPDX-License-Identifier: MIT
// Internal: tensor-core (WMMA, BF16 in, FP32 accumulate) variants of the DSA lightning indexer
// and its gradient, launched by dsa.cu (the sparse attention's are in dsa_mma.hpp).
#pragma once

#include <cstdint>

#include "backend/cuda/attention/dsa.hpp"

namespace moesim::cuda::dsa_tc {

// Lightning indexer scores (contract of dsa_indexer_scores; any head count, head dim 128).
void indexer_scores(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w, float* scores,
                    cudaStream_t stream);

// Its gradient (contract of dsa_indexer_backward); FP32 gradient weights enter the GEMMs as two
// BF16 terms (hi + lo).
void indexer_backward(const DsaIndexerShape& s, const bf16_bits* q, const bf16_bits* k, const float* w,
                      const float* d_scores, float* dq, float* dk, float* dw, cudaStream_t stream);

}  // namespace moesim::cuda::dsa_tc
