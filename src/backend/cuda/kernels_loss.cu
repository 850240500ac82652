// SPDX-License-Identifier: MIT
// Cross-entropy with its gradient, one block per row (vocabularies of 10^5 fit three passes over
// a row that stays in L2).
#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::to_bf;
using detail::to_f;

constexpr int kThreads = 1024;

__global__ void cross_entropy_kernel(const bf16_bits* __restrict__ logits, const int32_t* __restrict__ targets, int64_t vocab,
                                     float grad_scale, float* __restrict__ loss, bf16_bits* __restrict__ dlogits) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const bf16_bits* row = logits + r * vocab;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) mx = fmaxf(mx, to_f(row[i]));
  mx = detail::block_max(mx, red);
  float sum = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) sum += expf(to_f(row[i]) - mx);
  sum = detail::block_sum(sum, red);
  const int32_t target = targets[r];
  if (threadIdx.x == 0) loss[r] = logf(sum) + mx - to_f(row[target]);
  if (dlogits == nullptr) return;
  const float inv = 1.0f / sum;
  bf16_bits* drow = dlogits + r * vocab;
  for (int64_t i = threadIdx.x; i < vocab; i += blockDim.x) {
    const float p = expf(to_f(row[i]) - mx) * inv;
    drow[i] = to_bf(grad_scale * (p - (i == target ? 1.0f : 0.0f)));
  }
}

}  // namespace

void cross_entropy(const bf16_bits* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                   float* loss, bf16_bits* dlogits, cudaStream_t stream) {
  if (rows == 0) return;
  cross_entropy_kernel<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, vocab, grad_scale, loss,
                                                                             dlogits);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
