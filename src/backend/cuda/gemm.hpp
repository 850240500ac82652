// SPDX-License-Identifier: MIT
// BF16 GEMMs through cuBLASLt (FP32 accumulation), row-major like the rest of the backend:
//   C[m, n] = alpha * op(A) op(B) + beta * C,  op(A) [m, k], op(B) [k, n].
// A linear layer y = x W^T is {m = tokens, n = out, k = in, tb = transpose}. cuBLASLt is
// column-major, so the call computes C^T = op(B)^T op(A)^T with the operands swapped.
// Plans (descriptors and the heuristic's ranked algorithms) are cached per shape. Not thread-safe:
// one Gemm per device and thread.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include <cublasLt.h>
#include <cuda_runtime.h>

namespace moesim::cuda {

enum class Trans : uint8_t { none, transpose };
enum class OutType : uint8_t { bf16, fp32 };

struct GemmShape {
  int64_t m = 0, n = 0, k = 0;
  Trans ta = Trans::none;
  Trans tb = Trans::transpose;
  OutType out = OutType::bf16;

  auto key() const { return std::tuple(m, n, k, ta, tb, out); }
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
};

class Gemm {
 public:
  // Workspace for the algorithms that want one (split-K and stream-K kernels); 64 MiB covers all on Hopper.
  explicit Gemm(size_t workspace_bytes = size_t{64} << 20);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // Runs with the heuristic's `algo_rank`-th choice (0: its best guess, what production code uses).
  void run(const GemmShape& s, const void* a, const void* b, void* c, float alpha, float beta, cudaStream_t stream,
           int algo_rank = 0);
  // How many algorithms the heuristic offers for this shape (up to kMaxAlgorithms): calibration
  // times them all to find cuBLASLt's best on the shape.
  int num_algorithms(const GemmShape& s);
  static constexpr int kMaxAlgorithms = 8;

 private:
  struct Plan;
  Plan& plan(const GemmShape& s);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<decltype(GemmShape{}.key()), std::unique_ptr<Plan>> plans_;
};

// Expert GEMMs over rows grouped by expert (permute_plan's order): for each expert e with
// rows[e] > 0, C_e = op(A_e) op(B_e) with A_e the rows [offset_e, offset_e + rows[e]) of A (k
// columns), B_e = B + e * b_stride elements, C_e the same rows of C (n columns). A loop of cuBLASLt
// calls: correct first; a grouped kernel can replace it behind this signature.
void grouped_gemm(Gemm& gemm, std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const uint16_t* a,
                  const uint16_t* b, int64_t b_stride, uint16_t* c, cudaStream_t stream);

}  // namespace moesim::cuda
