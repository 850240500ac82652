// SPDX-License-Identifier: MIT
// The LM-head loss: cross-entropy of logits = h W^T, computed chunk_rows tokens at a time so that
// only [chunk_rows, vocab] logits ever exist (chunk_rows = rows: the full, unchunked loss).
#pragma once

#include <cstdint>

#include "backend/cuda/bf16.hpp"
#include "backend/cuda/gemm.hpp"

namespace moesim::cuda {

struct LossBuffers {
  bf16_bits* logits = nullptr;   // [chunk_rows, vocab] BF16 scratch
  bf16_bits* dlogits = nullptr;  // [chunk_rows, vocab] BF16 scratch; null: forward only
};

// h [rows, hidden], w [vocab, hidden] (BF16), targets [rows]. Writes loss [rows] (FP32); when
// buffers.dlogits is set also dh [rows, hidden] (BF16) and dw [vocab, hidden] (FP32, overwritten)
// for the loss sum(loss) * grad_scale.
void chunked_cross_entropy(Gemm& gemm, const bf16_bits* h, const bf16_bits* w, const int32_t* targets, int64_t rows,
                           int64_t hidden, int64_t vocab, int64_t chunk_rows, float grad_scale, const LossBuffers& buffers,
                           float* loss, bf16_bits* dh, float* dw, cudaStream_t stream);

}  // namespace moesim::cuda
