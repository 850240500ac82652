// SPDX-License-Identifier: MIT
#include "backend/cuda/loss.hpp"

#include <algorithm>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"

namespace moesim::cuda {

void chunked_cross_entropy(Gemm& gemm, const bf16_bits* h, const bf16_bits* w, const int32_t* targets, int64_t rows,
                           int64_t hidden, int64_t vocab, int64_t chunk_rows, float grad_scale, const LossBuffers& buffers,
                           float* loss, bf16_bits* dh, float* dw, cudaStream_t stream) {
  if (chunk_rows <= 0) throw BackendError("chunked_cross_entropy: chunk_rows must be positive");
  const bool backward = buffers.dlogits != nullptr;
  for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
    const int64_t m = std::min(chunk_rows, rows - r0);
    // logits [m, vocab] = h_chunk [m, hidden] W^T
    gemm.run({m, vocab, hidden, Trans::none, Trans::transpose, OutType::bf16}, h + r0 * hidden, w, buffers.logits, 1.0f,
             0.0f, stream);
    cross_entropy(buffers.logits, targets + r0, m, vocab, grad_scale, loss + r0, buffers.dlogits, stream);
    if (!backward) continue;
    // dh_chunk [m, hidden] = dlogits [m, vocab] W [vocab, hidden]
    gemm.run({m, hidden, vocab, Trans::none, Trans::none, OutType::bf16}, buffers.dlogits, w, dh + r0 * hidden, 1.0f,
             0.0f, stream);
    // dw [vocab, hidden] (+)= dlogits^T [vocab, m] h_chunk [m, hidden], accumulated in FP32 across chunks
    gemm.run({vocab, hidden, m, Trans::transpose, Trans::none, OutType::fp32}, buffers.dlogits, h + r0 * hidden, dw,
             1.0f, r0 == 0 ? 0.0f : 1.0f, stream);
  }
}

}  // namespace moesim::cuda
