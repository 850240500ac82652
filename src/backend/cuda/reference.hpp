// SPDX-License-Identifier: MIT
// CPU references for the backend's kernels: plain C++, inputs as the kernels see them (BF16 bit
// patterns, FP32), every sum in double, results in double before any output rounding. The tests
// compare GPU outputs with these within bounds derived from the output dtype (reference_bounds).
// No CUDA here: the references are built and tested on machines without a GPU.
// The attention kernels' references (attention/reference.hpp, same namespace `ref`, same library
// backend_reference) take the values the GPU sees widened to double instead of bits, since their
// tests compare error norms of whole tensors; together the two headers are every kernel's reference.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda::ref {

std::vector<double> to_double(std::span<const bf16_bits> x);

// C[m, n] = op(A) op(B), row-major, op as in gemm.hpp (ta: A stored [k, m]; tb: B stored [n, k]).
// abs_sum (if not null) receives sum_k |a| |b| per element, the scale of accumulation error.
std::vector<double> gemm(std::span<const bf16_bits> a, std::span<const bf16_bits> b, int64_t m, int64_t n, int64_t k,
                         bool ta, bool tb, std::vector<double>* abs_sum = nullptr);

struct RmsNormForward {
  std::vector<double> y;
  std::vector<double> rstd;
};
RmsNormForward rmsnorm_forward(std::span<const bf16_bits> x, std::span<const bf16_bits> w, int64_t rows, int64_t cols,
                               double eps);
struct RmsNormBackward {
  std::vector<double> dx;
  std::vector<double> dw;
};
RmsNormBackward rmsnorm_backward(std::span<const bf16_bits> x, std::span<const bf16_bits> w,
                                 std::span<const bf16_bits> dy, int64_t rows, int64_t cols, double eps);

std::vector<double> swiglu_forward(std::span<const bf16_bits> h, int64_t rows, int64_t f);
std::vector<double> swiglu_backward(std::span<const bf16_bits> h, std::span<const bf16_bits> dy, int64_t rows,
                                    int64_t f);

// Router scores [tokens, experts] (sigmoid or softmax) in double.
std::vector<double> router_scores(std::span<const float> logits, int64_t tokens, int num_experts, bool softmax);
struct TopK {
  std::vector<int32_t> index;   // [tokens, top_k], descending key, ties to the lower index
  std::vector<double> weight;   // unbiased scores of the chosen, renormalised when asked
};
TopK router_topk(std::span<const double> scores, std::span<const float> bias, int64_t tokens, int num_experts,
                 int top_k, bool normalize);

struct PermutePlan {
  std::vector<int32_t> counts;    // [experts]
  std::vector<int32_t> offsets;   // [experts + 1]
  std::vector<int32_t> dest_row;  // [assignments]
};
PermutePlan permute_plan(std::span<const int32_t> expert_index, int num_experts);
// y[t] = sum_j weight[t, j] * yp[dest_row[t * k + j]]
std::vector<double> unpermute_combine(std::span<const bf16_bits> yp, std::span<const int32_t> dest_row,
                                      std::span<const float> weight, int64_t tokens, int top_k, int64_t cols);

struct CrossEntropy {
  std::vector<double> loss;     // [rows]
  std::vector<double> dlogits;  // [rows, vocab], times grad_scale
};
CrossEntropy cross_entropy(std::span<const double> logits, std::span<const int32_t> targets, int64_t rows,
                           int64_t vocab, double grad_scale);

struct AdamWState {
  std::vector<double> master, m, v;
};
// One step in double with the same contract as kernels.hpp's adamw_step.
void adamw_step(AdamWState& s, std::span<const float> grad, double lr, double beta1, double beta2, double eps,
                double weight_decay, int64_t step);

// The executor's own kernels (op_kernels.hpp exec_kernels). Ids are clamped to the table.
// out[r, c] = table[ids[r], c]
std::vector<double> gather_rows(std::span<const bf16_bits> table, std::span<const int32_t> ids, int64_t cols,
                                int64_t table_rows);
// grad (table_rows x cols, FP32) after grad[ids[r]] += dy[r] for every row r.
std::vector<double> scatter_add_rows(std::span<const float> grad, std::span<const bf16_bits> dy,
                                     std::span<const int32_t> ids, int64_t cols, int64_t table_rows);
// y[t, c] = sum_j w[c, j] x[t -/+ j, c] (transposed: +, the input gradient), zero outside the rows.
std::vector<double> short_conv(std::span<const bf16_bits> x, std::span<const bf16_bits> w, int64_t rows,
                               int64_t channels, int width, bool transposed);
// y[i] = sum_s a[s] x[s n + i]; and its input gradients dx[s n + i] = a[s] dy[i].
std::vector<double> residual_mix(std::span<const bf16_bits> x, std::span<const float> a, int64_t n);
std::vector<double> residual_mix_backward(std::span<const bf16_bits> dy, std::span<const float> a);
// GQA head expansion: y[r, h, c] = x[r, h / group, c] over heads_kv * group heads; and its
// adjoint dx[r, j, c] = sum_g dy[r, j * group + g, c].
std::vector<double> repeat_kv_heads(std::span<const bf16_bits> x, int64_t rows, int64_t heads_kv, int group, int64_t d);
std::vector<double> sum_kv_head_groups(std::span<const float> dy, int64_t rows, int64_t heads_kv, int group, int64_t d);
// move_bytes: out[i] = sum of in[i + k n_out] (n_in >= n_out), else in[floor(i x (n_in / n_out))],
// the ratio in double.
std::vector<double> move_bytes(std::span<const bf16_bits> in, int64_t n_out);

}  // namespace moesim::cuda::ref
