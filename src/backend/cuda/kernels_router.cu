// SPDX-License-Identifier: MIT
// Router scores and top-k selection with a load-balancing bias: one warp per token, the row in
// shared memory, k rounds of a warp argmax (ties to the lower expert index).
#include <algorithm>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

constexpr int kMaxExperts = 4096;  // 2 x 4096 floats of shared memory per warp: 32 KB
constexpr int kMaxTopK = 64;

struct Best {
  float value;
  int index;
};

__device__ __forceinline__ bool better(float v, int i, const Best& b) {
  return v > b.value || (v == b.value && i < b.index);
}

__device__ Best warp_argmax(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    const float v = __shfl_xor_sync(0xffffffffu, b.value, o);
    const int i = __shfl_xor_sync(0xffffffffu, b.index, o);
    if (better(v, i, b)) b = {v, i};
  }
  return b;  // every lane holds the winner
}

// One warp per token; the token's scores and selection keys in shared memory (2 x experts floats
// per warp). k rounds of a warp argmax: no block-wide synchronisation.
__global__ void router_topk_kernel(const float* __restrict__ logits, const float* __restrict__ bias, int64_t tokens,
                                   int num_experts, int top_k, RouterScore score_kind, bool normalize,
                                   int32_t* __restrict__ expert_index, float* __restrict__ weights) {
  extern __shared__ float smem[];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  const int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / 32) + warp;
  if (t >= tokens) return;  // whole warps leave together
  float* score = smem + static_cast<size_t>(warp) * 2 * num_experts;  // unbiased scores
  float* key = score + num_experts;                                   // score + bias, -inf once taken
  const float* row = logits + t * num_experts;

  if (score_kind == RouterScore::sigmoid) {
    for (int e = lane; e < num_experts; e += 32) score[e] = 1.0f / (1.0f + expf(-row[e]));
  } else {
    float mx = -INFINITY;
    for (int e = lane; e < num_experts; e += 32) mx = fmaxf(mx, row[e]);
    mx = detail::warp_max(mx);
    float sum = 0;
    for (int e = lane; e < num_experts; e += 32) {
      const float p = expf(row[e] - mx);
      score[e] = p;
      sum += p;
    }
    sum = detail::warp_sum(sum);
    for (int e = lane; e < num_experts; e += 32) score[e] /= sum;
  }
  for (int e = lane; e < num_experts; e += 32) key[e] = score[e] + (bias ? bias[e] : 0.0f);
  __syncwarp();

  float chosen_sum = 0;  // lane 0's running sum of the chosen scores
  for (int j = 0; j < top_k; ++j) {
    Best b{-INFINITY, 0x7fffffff};
    for (int e = lane; e < num_experts; e += 32) {
      if (better(key[e], e, b)) b = {key[e], e};
    }
    b = warp_argmax(b);
    __syncwarp();  // every lane has read key[] before the winner is struck out
    if (lane == 0) {
      key[b.index] = -INFINITY;
      expert_index[t * top_k + j] = b.index;
      weights[t * top_k + j] = score[b.index];
      chosen_sum += score[b.index];
    }
    __syncwarp();
  }
  if (normalize && lane == 0) {
    const float inv = 1.0f / chosen_sum;
    for (int j = 0; j < top_k; ++j) weights[t * top_k + j] *= inv;
  }
}

}  // namespace

void router_topk(const float* logits, const float* bias, int64_t tokens, int num_experts, int top_k, RouterScore score,
                 bool normalize, int32_t* expert_index, float* weights, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > kMaxExperts || top_k < 1 || top_k > kMaxTopK || top_k > num_experts) {
    throw BackendError("router_topk: need 1 <= top_k <= min(64, num_experts) and num_experts <= 4096");
  }
  if (tokens == 0) return;
  // As many token-warps per block as fit in 48 KB of shared memory (no opt-in needed), at most 8.
  const size_t per_warp = 2 * static_cast<size_t>(num_experts) * sizeof(float);
  const int warps = static_cast<int>(std::min<size_t>(8, std::max<size_t>(1, (48 * 1024) / per_warp)));
  const auto blocks = static_cast<unsigned>(detail::ceil_div(tokens, warps));
  router_topk_kernel<<<blocks, 32 * warps, per_warp * static_cast<size_t>(warps), stream>>>(
      logits, bias, tokens, num_experts, top_k, score, normalize, expert_index, weights);
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
