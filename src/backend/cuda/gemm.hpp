// SPDX-License-Identifier: MIT
// BF16 GEMMs through cuBLASLt (FP32 accumulation), row-major like the rest of the backend:
//   C[m, n] = alpha * op(A) op(B) + beta * C,  op(A) [m, k], op(B) [k, n].
// A linear layer y = x W^T is {m = tokens, n = out, k = in, tb = transpose}. cuBLASLt is
// column-major, so the call computes C^T = op(B)^T op(A)^T with the operands swapped.
// Plans (descriptors and the heuristic's ranked algorithms) are cached per shape. Not thread-safe:
// one Gemm per device and thread.
//
// Autotuning: the first run of a shape times every algorithm the heuristic offers (up to
// kMaxAlgorithms) on the caller's stream and buffers by timer.hpp's convention (2 warm-ups, then
// the median of 5 to 50 runs each between its own events: as many as fill about half a
// millisecond, sized by one timed run of the heuristic's first - the device's own rate, no peak
// figure in code) and keeps the fastest for that shape; C is saved first when beta != 0 and rewritten by a final
// run with the chosen algorithm, so the caller's result is the chosen algorithm's. On a stream
// that is being captured into a CUDA graph nothing is timed: the heuristic's first choice runs and
// nothing is cached. Grouped GEMMs (grouped_gemm) change their row counts every step, so their
// choice is cached per shape with m rounded up to a power of two: the first m of a bucket is tuned,
// later m in the bucket reuse that algorithm (when cuBLASLt accepts it for the exact shape; else
// the heuristic's first for that m).
//
// Expert GEMMs (grouped_gemm) run two ways: a loop of those cuBLASLt calls, one per expert, or one
// call of cuBLAS's grouped GEMM (GroupedGemm). The first run of a key - (n, k, layout, experts with
// rows, their mean rows rounded up to a power of two) - times both by the same convention and keeps
// the faster: few rows per expert leave the loop's launches exposed, many leave cuBLASLt's tuned
// kernels ahead. Under capture the loop runs and nothing is cached.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <vector>

#include <cublas_v2.h>
#include <cublasLt.h>
#include <cuda_runtime.h>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda {

class GroupedGemm;

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

  // How the autotuned choice is cached: per exact shape, or (grouped GEMMs) per shape with m
  // rounded up to a power of two.
  enum class TuneKey : uint8_t { exact, rows_pow2 };

  // Runs with the `algo_rank`-th algorithm of the tuned order: 0 is the backend's choice (the
  // fastest measured on first use, what production code uses), 1 .. num_algorithms - 1 are the
  // heuristic's other algorithms in the heuristic's order. So calibration can time every
  // algorithm with ranks 0 .. num_algorithms - 1. Any rank tunes the shape first if needed.
  void run(const GemmShape& s, const void* a, const void* b, void* c, float alpha, float beta, cudaStream_t stream,
           int algo_rank = 0, TuneKey key = TuneKey::exact);
  // How many algorithms the heuristic offers for this shape (up to kMaxAlgorithms): calibration
  // times them all to find cuBLASLt's best on the shape.
  int num_algorithms(const GemmShape& s);
  // The heuristic's index of the backend's choice for a shape already run (-1 if not tuned yet).
  // The heuristic's first choice runs at rank 0 when this is 0, else at rank 1.
  int chosen_heuristic_index(const GemmShape& s);
  static constexpr int kMaxAlgorithms = 8;

  // Expert GEMMs by the faster of the two ways (see the top of this file and grouped_gemm below).
  enum class ExpertWay : int8_t { undecided = -1, loop = 0, grouped = 1 };
  void experts(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a, const bf16_bits* b,
               int64_t b_stride, bf16_bits* c, cudaStream_t stream);
  // The way experts() runs these rows and shape: undecided before their key's first run.
  ExpertWay expert_way(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb) const;

 private:
  struct Plan;
  Plan& plan(const GemmShape& s);
  void tune(Plan& p, const GemmShape& s, const void* a, const void* b, void* c, float alpha, float beta,
            cudaStream_t stream, TuneKey key);
  cublasStatus_t matmul(Plan& p, size_t heuristic_index, const void* a, const void* b, void* c, float alpha,
                        float beta, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  std::map<decltype(GemmShape{}.key()), std::unique_ptr<Plan>> plans_;
  // Grouped GEMMs' choices per shape with m rounded up to a power of two.
  std::map<decltype(GemmShape{}.key()), cublasLtMatmulAlgo_t> bucket_choice_;
  // experts(): cuBLAS's grouped call (made on first use) and the way chosen per key.
  using ExpertKey = std::tuple<int64_t, int64_t, Trans, int64_t, int64_t>;
  static ExpertKey expert_key(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb);
  std::unique_ptr<GroupedGemm> grouped_;
  std::map<ExpertKey, ExpertWay> expert_way_;
};

// Expert GEMMs over rows grouped by expert (permute_plan's order): for each expert e with
// rows[e] > 0, C_e = op(A_e) op(B_e) with A_e the rows [offset_e, offset_e + rows[e]) of A (k
// columns), B_e = B + e * b_stride elements, C_e the same rows of C (n columns). What the executor
// runs: Gemm::experts, the faster of expert_gemm_loop and GroupedGemm for the shape.
void grouped_gemm(Gemm& gemm, std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a,
                  const bf16_bits* b, int64_t b_stride, bf16_bits* c, cudaStream_t stream);

// The same product as a loop of Gemm::run calls, one per expert with rows (each autotuned per
// m rounded up to a power of two).
void expert_gemm_loop(Gemm& gemm, std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a,
                      const bf16_bits* b, int64_t b_stride, bf16_bits* c, cudaStream_t stream);

// The same product as grouped_gemm in one call of cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx,
// cuBLAS 12.5 and later; FP32 accumulation): one group per expert with rows, nothing tuned.
// grouped_gemm_bench (bench/grouped_gemm_device.sh) times it against the loop. Not thread-safe:
// one per device and thread.
class GroupedGemm {
 public:
  GroupedGemm();
  ~GroupedGemm();
  GroupedGemm(const GroupedGemm&) = delete;
  GroupedGemm& operator=(const GroupedGemm&) = delete;

  void run(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a, const bf16_bits* b,
           int64_t b_stride, bf16_bits* c, cudaStream_t stream);

 private:
  cublasHandle_t handle_ = nullptr;
  void** pointers_ = nullptr;  // device: the A, B and C pointer arrays, `capacity_` each
  size_t capacity_ = 0;
  // Host-side arguments of one call, kept to avoid allocating per call.
  std::vector<const void*> host_pointers_;
  std::vector<cublasOperation_t> ta_, tb_;
  std::vector<int> m_, n_, k_, lda_, ldb_, ldc_, sizes_;
  std::vector<float> alpha_, beta_;
};

}  // namespace moesim::cuda
