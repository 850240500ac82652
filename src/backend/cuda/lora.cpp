// SPDX-License-Identifier: MIT
#include "backend/cuda/lora.hpp"

namespace moesim::cuda {

void lora_forward(Gemm& gemm, const bf16_bits* x, const bf16_bits* a, const bf16_bits* b, bf16_bits* tmp, bf16_bits* y,
                  int64_t rows, int64_t n, int64_t k, int64_t rank, float scale, cudaStream_t stream) {
  if (rows == 0) return;
  gemm.run({rows, rank, k, Trans::none, Trans::transpose, OutType::bf16}, x, a, tmp, 1.0f, 0.0f, stream);
  gemm.run({rows, n, rank, Trans::none, Trans::transpose, OutType::bf16}, tmp, b, y, scale, 1.0f, stream);  // accumulate
}

}  // namespace moesim::cuda
