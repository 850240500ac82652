// SPDX-License-Identifier: MIT
// LoRA adapter on a frozen linear layer: y += scale * (x A^T) B^T, with A [rank, k] and
// B [n, rank]; two GEMMs through a [rows, rank] BF16 intermediate (the usual unfused form).
#pragma once

#include <cstdint>

#include "backend/cuda/bf16.hpp"
#include "backend/cuda/gemm.hpp"

namespace moesim::cuda {

void lora_forward(Gemm& gemm, const bf16_bits* x, const bf16_bits* a, const bf16_bits* b, bf16_bits* tmp, bf16_bits* y,
                  int64_t rows, int64_t n, int64_t k, int64_t rank, float scale, cudaStream_t stream);

}  // namespace moesim::cuda
