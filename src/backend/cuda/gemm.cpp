// SPDX-License-Identifier: MIT
#include "backend/cuda/gemm.hpp"

#include "backend/cuda/check.hpp"

namespace moesim::cuda {

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C
  std::vector<cublasLtMatmulHeuristicResult_t> algos;

  ~Plan() {
    if (a) (void)cublasLtMatrixLayoutDestroy(a);
    if (b) (void)cublasLtMatrixLayoutDestroy(b);
    if (c) (void)cublasLtMatrixLayoutDestroy(c);
    if (desc) (void)cublasLtMatmulDescDestroy(desc);
  }
};

Gemm::Gemm(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  MOESIM_CUBLAS_CHECK(cublasLtCreate(&handle_));
  if (workspace_bytes_ > 0) MOESIM_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

Gemm::~Gemm() {
  plans_.clear();
  if (workspace_) (void)cudaFree(workspace_);
  if (handle_) (void)cublasLtDestroy(handle_);
}

Gemm::Plan& Gemm::plan(const GemmShape& s) {
  auto it = plans_.find(s.key());
  if (it != plans_.end()) return *it->second;
  if (s.m <= 0 || s.n <= 0 || s.k <= 0) throw BackendError("Gemm: m, n and k must be positive");
  auto p = std::make_unique<Plan>();
  const cudaDataType_t out = s.out == OutType::bf16 ? CUDA_R_16BF : CUDA_R_32F;
  MOESIM_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: D^T [n, m] = op(B)^T [n, k] x op(A)^T [k, m] (see the header).
  const cublasOperation_t op_a = s.tb == Trans::none ? CUBLAS_OP_N : CUBLAS_OP_T;
  const cublasOperation_t op_b = s.ta == Trans::none ? CUBLAS_OP_N : CUBLAS_OP_T;
  MOESIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  MOESIM_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  const auto u = [](int64_t v) { return static_cast<uint64_t>(v); };
  // Our B, row-major [k, n] (ld n) or [n, k] (ld k): column-major [n, k] or [k, n].
  if (s.tb == Trans::none) {
    MOESIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, u(s.n), u(s.k), s.n));
  } else {
    MOESIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, u(s.k), u(s.n), s.k));
  }
  // Our A, row-major [m, k] (ld k) or [k, m] (ld m): column-major [k, m] or [m, k].
  if (s.ta == Trans::none) {
    MOESIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, u(s.k), u(s.m), s.k));
  } else {
    MOESIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, u(s.m), u(s.k), s.m));
  }
  MOESIM_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->c, out, u(s.n), u(s.m), s.n));

  cublasLtMatmulPreference_t pref = nullptr;
  MOESIM_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  MOESIM_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                           &workspace_bytes_, sizeof(workspace_bytes_)));
  p->algos.resize(kMaxAlgorithms);
  int returned = 0;
  const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(handle_, p->desc, p->a, p->b, p->c, p->c, pref,
                                                           kMaxAlgorithms, p->algos.data(), &returned);
  (void)cublasLtMatmulPreferenceDestroy(pref);
  MOESIM_CUBLAS_CHECK(st);
  if (returned == 0) throw BackendError("Gemm: cuBLASLt offers no algorithm for this shape");
  p->algos.resize(static_cast<size_t>(returned));
  return *plans_.emplace(s.key(), std::move(p)).first->second;
}

int Gemm::num_algorithms(const GemmShape& s) { return static_cast<int>(plan(s).algos.size()); }

void Gemm::run(const GemmShape& s, const void* a, const void* b, void* c, float alpha, float beta, cudaStream_t stream,
               int algo_rank) {
  Plan& p = plan(s);
  if (algo_rank < 0 || algo_rank >= static_cast<int>(p.algos.size())) throw BackendError("Gemm: no such algorithm");
  const auto& algo = p.algos[static_cast<size_t>(algo_rank)];
  MOESIM_CUBLAS_CHECK(cublasLtMatmul(handle_, p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &algo.algo,
                                     workspace_, workspace_bytes_, stream));
}

void grouped_gemm(Gemm& gemm, std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const uint16_t* a,
                  const uint16_t* b, int64_t b_stride, uint16_t* c, cudaStream_t stream) {
  int64_t offset = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const int64_t m = rows[e];
    if (m > 0) {
      const GemmShape s{m, n, k, Trans::none, tb, OutType::bf16};
      gemm.run(s, a + offset * k, b + static_cast<int64_t>(e) * b_stride, c + offset * n, 1.0f, 0.0f, stream);
    }
    offset += m;
  }
}

}  // namespace moesim::cuda
