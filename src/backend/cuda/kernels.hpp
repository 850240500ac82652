// SPDX-License-Identifier: MIT
// Launchers for the backend's hand-written kernels (the GEMMs are in gemm.hpp). Each takes a
// stream, computes its grid with a ceil-div, launches and checks the launch. BF16 tensors are
// passed as bf16_bits (the layout of __nv_bfloat16); all math accumulates in FP32. Row-major
// tensors; `rows` counts tokens. Every kernel has a CPU reference in reference.hpp.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda {

// Holds `stream` for `seconds` with one thread sleeping on the GPU's global timer, the rest of the
// GPU idle: a gap between timed calls that draws about idle power (no math, so no CPU reference).
void idle_gpu(double seconds, cudaStream_t stream);

// RMSNorm: y = x / sqrt(mean(x^2) + eps) * w; rstd (rows) is kept for the backward pass.
void rmsnorm_forward(const bf16_bits* x, const bf16_bits* w, bf16_bits* y, float* rstd, int64_t rows, int64_t cols, float eps,
                     cudaStream_t stream);
// dx = rstd * (g - xhat * mean(g * xhat)) with g = dy * w and xhat = x * rstd; dw = sum_rows dy * xhat (FP32).
// dw is summed over row ranges into `scratch` (rmsnorm_backward_scratch_floats of them; null when
// that is 0), then over the ranges, in a fixed order: deterministic.
void rmsnorm_backward(const bf16_bits* x, const bf16_bits* w, const float* rstd, const bf16_bits* dy, bf16_bits* dx, float* dw,
                      int64_t rows, int64_t cols, float* scratch, cudaStream_t stream);
int64_t rmsnorm_backward_scratch_floats(int64_t rows, int64_t cols);

// SwiGLU on the fused gate|up projection h [rows, 2f]: y = silu(gate) * up, y [rows, f].
void swiglu_forward(const bf16_bits* h, bf16_bits* y, int64_t rows, int64_t f, cudaStream_t stream);
// dh [rows, 2f]: d gate = dy * up * silu'(gate), d up = dy * silu(gate).
void swiglu_backward(const bf16_bits* h, const bf16_bits* dy, bf16_bits* dh, int64_t rows, int64_t f, cudaStream_t stream);

// c = a + b (residual adds, gradient accumulation in BF16).
void add(const bf16_bits* a, const bf16_bits* b, bf16_bits* c, int64_t n, cudaStream_t stream);
// A memory-bound copy at full bandwidth (calibration of the memory roofline).
void copy(const bf16_bits* src, bf16_bits* dst, int64_t n, cudaStream_t stream);

// Router selection on FP32 logits [tokens, num_experts]: scores = sigmoid(logits) or a softmax over
// the experts; the top_k experts by score + bias (bias may be null: DeepSeek-V3's load-balancing
// bias only steers selection) are chosen, ties to the lower index; weights are the unbiased scores
// of the chosen experts, divided by their sum when `normalize`. Outputs [tokens, top_k], in
// descending order of biased score. num_experts <= 4096, top_k <= 64.
enum class RouterScore : uint8_t { sigmoid, softmax };
void router_topk(const float* logits, const float* bias, int64_t tokens, int num_experts, int top_k, RouterScore score,
                 bool normalize, int32_t* expert_index, float* weights, cudaStream_t stream);

// Token -> expert order. For the num_assign = tokens * top_k assignments in expert_index, counts[e]
// is the rows of expert e, offsets[e] the first (offsets has num_experts + 1 entries), and
// dest_row[a] the row assignment a takes in expert order: grouped by expert, stable in token order
// (deterministic). `scratch` holds permute_plan_scratch(num_assign, num_experts) ints;
// num_experts <= 4096.
int64_t permute_plan_scratch(int64_t num_assign, int num_experts);
void permute_plan(const int32_t* expert_index, int64_t num_assign, int num_experts, int32_t* counts, int32_t* offsets,
                  int32_t* dest_row, int32_t* scratch, cudaStream_t stream);
// xp[dest_row[a]] = x[a / top_k] for every assignment a; xp has num_assign rows of `cols`.
void permute_rows(const bf16_bits* x, const int32_t* dest_row, int64_t num_assign, int top_k, int64_t cols, bf16_bits* xp,
                  cudaStream_t stream);
// Back to token order with the combine weights: y[t] = sum_j weights[t, j] * yp[dest_row[t * top_k + j]].
void unpermute_combine(const bf16_bits* yp, const int32_t* dest_row, const float* weights, int64_t tokens, int top_k,
                       int64_t cols, bf16_bits* y, cudaStream_t stream);

// Cross-entropy over logits [rows, vocab] with integer targets: loss[r] = logsumexp - logit[target]
// (FP32), and when dlogits is not null its gradient grad_scale * (softmax - onehot) in BF16 (the
// usual fused forward + backward; grad_scale is 1 / tokens for a mean loss).
void cross_entropy(const bf16_bits* logits, const int32_t* targets, int64_t rows, int64_t vocab, float grad_scale,
                   float* loss, bf16_bits* dlogits, cudaStream_t stream);

// One AdamW step on FP32 master weights with FP32 gradients and moments; writes the BF16 copy of
// the weights the next forward pass reads. Decoupled weight decay (Loshchilov & Hutter):
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   w = w - lr * (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + wd * w)
struct AdamWConfig {
  double lr = 1e-4;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;
  int64_t step = 1;  // 1-based, for the bias corrections
};
// `param` (the BF16 working copy) may be null: with FSDP2 mixed precision the BF16 weights are
// cast when gathered, not kept.
void adamw_step(float* master, const float* grad, float* m, float* v, bf16_bits* param, int64_t n, const AdamWConfig& cfg,
                cudaStream_t stream);

// Fills a BF16 buffer with uniform values in [lo, hi) from a counter-based hash of (seed, index):
// large inputs for benchmarks without a host upload, never zeros.
void fill_uniform(bf16_bits* x, int64_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);

}  // namespace moesim::cuda
