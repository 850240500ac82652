// SPDX-License-Identifier: MIT
// Token <-> expert order: the plan (deterministic, stable in token order), then row gathers.
#include <algorithm>

#include "backend/cuda/check.hpp"
#include "backend/cuda/kernels.hpp"
#include "backend/cuda/kernels_common.cuh"

namespace moesim::cuda {
namespace {

using detail::to_bf;
using detail::to_f;

// The plan in three O(assignments) passes over chunks of kChunk assignments:
//   1. hist[c][e]: assignments of chunk c that go to expert e (a shared-memory histogram);
//   2. per expert, an exclusive scan over the chunks (hist becomes each chunk's first rank) and
//      counts[e]; then offsets = exclusive scan of counts;
//   3. dest_row[a] = offsets[e] + hist[chunk(a)][e] + (earlier assignments of e inside the chunk).
// Every step has a fixed order, so the plan is deterministic and stable in token order.
constexpr int kChunk = 256;

__global__ void chunk_histogram_kernel(const int32_t* __restrict__ expert_index, int64_t num_assign, int num_experts,
                                       int32_t* __restrict__ hist) {
  extern __shared__ int32_t h[];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) h[e] = 0;
  __syncthreads();
  const int64_t a = blockIdx.x * static_cast<int64_t>(kChunk) + threadIdx.x;
  if (a < num_assign) atomicAdd(&h[expert_index[a]], 1);  // integer counts: order does not matter
  __syncthreads();
  int32_t* out = hist + blockIdx.x * static_cast<int64_t>(num_experts);
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) out[e] = h[e];
}

// One block: thread e scans expert e's column over the chunks; thread 0 then scans the counts.
__global__ void expert_scan_kernel(int32_t* __restrict__ hist, int64_t num_chunks, int num_experts,
                                   int32_t* __restrict__ counts, int32_t* __restrict__ offsets) {
  extern __shared__ int32_t total[];
  for (int e = threadIdx.x; e < num_experts; e += blockDim.x) {
    int32_t running = 0;
    for (int64_t c = 0; c < num_chunks; ++c) {
      const int32_t v = hist[c * num_experts + e];
      hist[c * num_experts + e] = running;
      running += v;
    }
    counts[e] = running;
    total[e] = running;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int32_t acc = 0;
    for (int e = 0; e < num_experts; ++e) {
      offsets[e] = acc;
      acc += total[e];
    }
    offsets[num_experts] = acc;
  }
}

__global__ void dest_row_kernel(const int32_t* __restrict__ expert_index, int64_t num_assign, int num_experts,
                                const int32_t* __restrict__ hist, const int32_t* __restrict__ offsets,
                                int32_t* __restrict__ dest_row) {
  __shared__ int32_t idx[kChunk];
  const int64_t base = blockIdx.x * static_cast<int64_t>(kChunk);
  const int64_t a = base + threadIdx.x;
  idx[threadIdx.x] = a < num_assign ? expert_index[a] : -1;
  __syncthreads();
  if (a >= num_assign) return;
  const int32_t e = idx[threadIdx.x];
  int32_t local = 0;
  for (int j = 0; j < static_cast<int>(threadIdx.x); ++j) local += idx[j] == e;
  dest_row[a] = offsets[e] + hist[blockIdx.x * static_cast<int64_t>(num_experts) + e] + local;
}

// Rows copied V elements at a time (V = 8: 16-byte accesses when the row length and the pointers
// allow; 2-byte accesses ran the unpermute at half the copy bandwidth, 2026-12-03).
template <int V>
__global__ void permute_rows_kernel(const bf16_bits* __restrict__ x, const int32_t* __restrict__ dest_row, int top_k,
                                    int64_t cols, bf16_bits* __restrict__ xp) {
  const int64_t a = blockIdx.x;
  const bf16_bits* src = x + (a / top_k) * cols;
  bf16_bits* dst = xp + static_cast<int64_t>(dest_row[a]) * cols;
  for (int64_t c = threadIdx.x * static_cast<int64_t>(V); c < cols; c += static_cast<int64_t>(blockDim.x) * V) {
    float v[V];
    detail::load<V>(src + c, v);
    detail::store<V>(dst + c, v);
  }
}

template <int V>
__global__ void unpermute_combine_kernel(const bf16_bits* __restrict__ yp, const int32_t* __restrict__ dest_row,
                                         const float* __restrict__ weights, int top_k, int64_t cols,
                                         bf16_bits* __restrict__ y) {
  const int64_t t = blockIdx.x;
  for (int64_t c = threadIdx.x * static_cast<int64_t>(V); c < cols; c += static_cast<int64_t>(blockDim.x) * V) {
    float acc[V] = {};
    for (int j = 0; j < top_k; ++j) {
      float v[V];
      detail::load<V>(yp + static_cast<int64_t>(dest_row[t * top_k + j]) * cols + c, v);
      const float wj = weights[t * top_k + j];
#pragma unroll
      for (int k = 0; k < V; ++k) acc[k] += wj * v[k];
    }
    detail::store<V>(y + t * cols + c, acc);
  }
}

}  // namespace

int64_t permute_plan_scratch(int64_t num_assign, int num_experts) {
  return std::max<int64_t>(1, detail::ceil_div(num_assign, kChunk)) * num_experts;
}

void permute_plan(const int32_t* expert_index, int64_t num_assign, int num_experts, int32_t* counts, int32_t* offsets,
                  int32_t* dest_row, int32_t* scratch, cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 4096) throw BackendError("permute_plan: need 1 <= num_experts <= 4096");
  const int64_t num_chunks = detail::ceil_div(num_assign, kChunk);
  const size_t hist_bytes = static_cast<size_t>(num_experts) * sizeof(int32_t);
  if (num_chunks > 0) {
    chunk_histogram_kernel<<<static_cast<unsigned>(num_chunks), kChunk, hist_bytes, stream>>>(expert_index, num_assign,
                                                                                              num_experts, scratch);
    MOESIM_LAUNCH_CHECK();
  }
  expert_scan_kernel<<<1, 1024, hist_bytes, stream>>>(scratch, num_chunks, num_experts, counts, offsets);
  MOESIM_LAUNCH_CHECK();
  if (num_chunks == 0) return;
  dest_row_kernel<<<static_cast<unsigned>(num_chunks), kChunk, 0, stream>>>(expert_index, num_assign, num_experts,
                                                                             scratch, offsets, dest_row);
  MOESIM_LAUNCH_CHECK();
}

void permute_rows(const bf16_bits* x, const int32_t* dest_row, int64_t num_assign, int top_k, int64_t cols, bf16_bits* xp,
                  cudaStream_t stream) {
  if (num_assign == 0) return;
  if (detail::vectorizable(cols, {x, xp})) {
    permute_rows_kernel<8><<<static_cast<unsigned>(num_assign), 256, 0, stream>>>(x, dest_row, top_k, cols, xp);
  } else {
    permute_rows_kernel<1><<<static_cast<unsigned>(num_assign), 256, 0, stream>>>(x, dest_row, top_k, cols, xp);
  }
  MOESIM_LAUNCH_CHECK();
}

void unpermute_combine(const bf16_bits* yp, const int32_t* dest_row, const float* weights, int64_t tokens, int top_k,
                       int64_t cols, bf16_bits* y, cudaStream_t stream) {
  if (tokens == 0) return;
  if (detail::vectorizable(cols, {yp, y})) {
    unpermute_combine_kernel<8><<<static_cast<unsigned>(tokens), 256, 0, stream>>>(yp, dest_row, weights, top_k, cols, y);
  } else {
    unpermute_combine_kernel<1><<<static_cast<unsigned>(tokens), 256, 0, stream>>>(yp, dest_row, weights, top_k, cols, y);
  }
  MOESIM_LAUNCH_CHECK();
}

}  // namespace moesim::cuda
