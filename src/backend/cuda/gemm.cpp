// SPDX-License-Identifier: MIT
#include "backend/cuda/gemm.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "backend/cuda/check.hpp"
#include "backend/cuda/timer.hpp"

namespace moesim::cuda {

struct Gemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;  // cuBLASLt's A (our B), B (our A), C
  std::vector<cublasLtMatmulHeuristicResult_t> algos;
  int chosen = -1;  // index into algos of the autotuned choice; -1 until tuned

  // Tuned order (see the header): rank 0 is the choice, then the others in the heuristic's order.
  size_t index_of_rank(int rank) const {
    if (chosen < 0) return static_cast<size_t>(rank);
    if (rank == 0) return static_cast<size_t>(chosen);
    return static_cast<size_t>(rank - 1 + (rank - 1 >= chosen ? 1 : 0));
  }

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
  grouped_.reset();
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

int Gemm::chosen_heuristic_index(const GemmShape& s) {
  const auto it = plans_.find(s.key());
  return it == plans_.end() ? -1 : it->second->chosen;
}

cublasStatus_t Gemm::matmul(Plan& p, size_t heuristic_index, const void* a, const void* b, void* c, float alpha,
                            float beta, cudaStream_t stream) {
  return cublasLtMatmul(handle_, p.desc, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &p.algos[heuristic_index].algo,
                        workspace_, workspace_bytes_, stream);
}

namespace {

int64_t round_up_pow2(int64_t v) {
  int64_t r = 1;
  while (r < v) r <<= 1;
  return r;
}

// Timed runs for about half a millisecond of a candidate that takes `per_run_s` a run (5 to 50): a
// small GEMM takes a few microseconds, where five runs would let event resolution and jitter choose.
int timed_repeats(double per_run_s) {
  constexpr double kBudget = 5e-4;
  if (!std::isfinite(per_run_s)) per_run_s = kBudget / 5;
  return static_cast<int>(std::clamp(std::ceil(kBudget / std::max(per_run_s, 1e-7)), 5.0, 50.0));
}

// Frees the saved copy of C however tuning ends.
struct SavedOutput {
  void* bytes = nullptr;
  ~SavedOutput() {
    if (bytes) (void)cudaFree(bytes);
  }
};

}  // namespace

void Gemm::tune(Plan& p, const GemmShape& s, const void* a, const void* b, void* c, float alpha, float beta,
                cudaStream_t stream, TuneKey key) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  MOESIM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture != cudaStreamCaptureStatusNone) return;  // no timing inside a graph: heuristic's first, untuned

  auto bucket_key = s.key();
  if (key == TuneKey::rows_pow2) {
    std::get<0>(bucket_key) = round_up_pow2(s.m);
    const auto it = bucket_choice_.find(bucket_key);
    if (it != bucket_choice_.end()) {
      for (size_t i = 0; i < p.algos.size(); ++i) {
        if (std::memcmp(&p.algos[i].algo, &it->second, sizeof(cublasLtMatmulAlgo_t)) == 0) {
          p.chosen = static_cast<int>(i);
          return;
        }
      }
      // Not among this m's heuristic results: use it if cuBLASLt accepts it for the exact shape.
      cublasLtMatmulHeuristicResult_t r{};
      if (cublasLtMatmulAlgoCheck(handle_, p.desc, p.a, p.b, p.c, p.c, &it->second, &r) == CUBLAS_STATUS_SUCCESS &&
          r.state == CUBLAS_STATUS_SUCCESS && r.workspaceSize <= workspace_bytes_) {
        r.algo = it->second;
        p.algos.push_back(r);
        p.chosen = static_cast<int>(p.algos.size() - 1);
      } else {
        p.chosen = 0;
      }
      return;
    }
  }

  p.chosen = 0;
  if (p.algos.size() > 1) {
    const size_t c_bytes =
        static_cast<size_t>(s.m) * static_cast<size_t>(s.n) * (s.out == OutType::bf16 ? sizeof(bf16_bits) : sizeof(float));
    SavedOutput saved;
    if (beta != 0.0f) {  // the trial runs overwrite C, which this GEMM also reads
      MOESIM_CUDA_CHECK(cudaMalloc(&saved.bytes, c_bytes));
      MOESIM_CUDA_CHECK(cudaMemcpyAsync(saved.bytes, c, c_bytes, cudaMemcpyDeviceToDevice, stream));
    }
    // Algorithm i by timer.hpp's convention; +infinity when cuBLASLt refuses it at run time (an
    // algorithm the heuristic ranks may still refuse the problem).
    const auto trial_s = [&](size_t i, int warmup, int repeats) {
      if (beta != 0.0f) MOESIM_CUDA_CHECK(cudaMemcpyAsync(c, saved.bytes, c_bytes, cudaMemcpyDeviceToDevice, stream));
      bool ok = true;
      const Timing t = time_on_stream(stream, warmup, repeats, [&](int) {
        if (ok) ok = matmul(p, i, a, b, c, alpha, beta, stream) == CUBLAS_STATUS_SUCCESS;
      });
      return ok ? t.median_s : std::numeric_limits<double>::infinity();
    };
    // The device itself says how long a run takes: one timed run of the heuristic's first.
    constexpr int kWarmup = 2;
    const int num_timed = timed_repeats(trial_s(0, 1, 1));
    double best_s = std::numeric_limits<double>::infinity();
    int best = -1;
    for (size_t i = 0; i < p.algos.size(); ++i) {
      const double t = trial_s(i, kWarmup, num_timed);
      if (t < best_s) {
        best_s = t;
        best = static_cast<int>(i);
      }
    }
    if (best >= 0) p.chosen = best;
    if (beta != 0.0f) {
      MOESIM_CUDA_CHECK(cudaMemcpyAsync(c, saved.bytes, c_bytes, cudaMemcpyDeviceToDevice, stream));
      MOESIM_CUDA_CHECK(cudaStreamSynchronize(stream));  // before ~SavedOutput frees the copy
    }
  }
  if (key == TuneKey::rows_pow2) bucket_choice_[bucket_key] = p.algos[static_cast<size_t>(p.chosen)].algo;
}

void Gemm::run(const GemmShape& s, const void* a, const void* b, void* c, float alpha, float beta, cudaStream_t stream,
               int algo_rank, TuneKey key) {
  Plan& p = plan(s);
  if (p.chosen < 0) tune(p, s, a, b, c, alpha, beta, stream, key);
  if (algo_rank < 0 || algo_rank >= static_cast<int>(p.algos.size())) throw BackendError("Gemm: no such algorithm");
  // The final run (after tuning, the one whose output the caller gets) uses the chosen algorithm.
  MOESIM_CUBLAS_CHECK(matmul(p, p.index_of_rank(algo_rank), a, b, c, alpha, beta, stream));
}

void expert_gemm_loop(Gemm& gemm, std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a,
                      const bf16_bits* b, int64_t b_stride, bf16_bits* c, cudaStream_t stream) {
  int64_t offset = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const int64_t m = rows[e];
    if (m > 0) {
      const GemmShape s{m, n, k, Trans::none, tb, OutType::bf16};
      gemm.run(s, a + offset * k, b + static_cast<int64_t>(e) * b_stride, c + offset * n, 1.0f, 0.0f, stream, 0,
               Gemm::TuneKey::rows_pow2);
    }
    offset += m;
  }
}

void grouped_gemm(Gemm& gemm, std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a,
                  const bf16_bits* b, int64_t b_stride, bf16_bits* c, cudaStream_t stream) {
  gemm.experts(rows, n, k, tb, a, b, b_stride, c, stream);
}

Gemm::ExpertKey Gemm::expert_key(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb) {
  int64_t groups = 0, total = 0;
  for (int32_t m : rows) {
    groups += m > 0 ? 1 : 0;
    total += std::max(m, 0);
  }
  const int64_t mean = groups > 0 ? (total + groups - 1) / groups : 0;
  return {n, k, tb, groups, round_up_pow2(mean)};
}

Gemm::ExpertWay Gemm::expert_way(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb) const {
  const auto it = expert_way_.find(expert_key(rows, n, k, tb));
  return it == expert_way_.end() ? ExpertWay::undecided : it->second;
}

void Gemm::experts(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a,
                   const bf16_bits* b, int64_t b_stride, bf16_bits* c, cudaStream_t stream) {
  const auto loop = [&] { expert_gemm_loop(*this, rows, n, k, tb, a, b, b_stride, c, stream); };
  const auto one_call = [&] {
    if (!grouped_) grouped_ = std::make_unique<GroupedGemm>();
    grouped_->run(rows, n, k, tb, a, b, b_stride, c, stream);
  };
  const ExpertKey key = expert_key(rows, n, k, tb);
  auto it = expert_way_.find(key);
  if (it == expert_way_.end()) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    MOESIM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
    if (capture != cudaStreamCaptureStatusNone || std::get<3>(key) == 0) return loop();  // nothing timed or to time
    // Both ways by the tuning convention (C is only written: trials need no saved copy). The
    // loop's warm-ups tune its per-expert algorithms first; one timed run sizes the repeats.
    const int repeats = timed_repeats(time_on_stream(stream, 2, 1, [&](int) { loop(); }).median_s);
    const double loop_s = time_on_stream(stream, 1, repeats, [&](int) { loop(); }).median_s;
    // cuBLAS may refuse the grouped call for a shape (a status, not a sticky CUDA error): the loop then.
    double grouped_s = std::numeric_limits<double>::infinity();
    try {
      grouped_s = time_on_stream(stream, 2, repeats, [&](int) { one_call(); }).median_s;
    } catch (const BackendError&) {
      MOESIM_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
    it = expert_way_.emplace(key, grouped_s < loop_s ? ExpertWay::grouped : ExpertWay::loop).first;
  }
  // The final run, whose output the caller gets, by the chosen way.
  if (it->second == ExpertWay::grouped) {
    one_call();
  } else {
    loop();
  }
}

GroupedGemm::GroupedGemm() { MOESIM_CUBLAS_CHECK(cublasCreate(&handle_)); }

GroupedGemm::~GroupedGemm() {
  if (pointers_) cudaFree(pointers_);
  if (handle_) cublasDestroy(handle_);
}

// Row-major C_e [m_e, n] = A_e [m_e, k] op(B_e) is column-major C_e^T [n, m_e] = op(B_e)^T A_e^T,
// as in Gemm: B_e's row-major storage read column-major is B_e^T, so op(B_e)^T is that storage
// transposed when tb is transpose (B_e stored [n, k]) and as it is when not (B_e stored [k, n]).
void GroupedGemm::run(std::span<const int32_t> rows, int64_t n, int64_t k, Trans tb, const bf16_bits* a,
                      const bf16_bits* b, int64_t b_stride, bf16_bits* c, cudaStream_t stream) {
  const auto groups = static_cast<size_t>(std::count_if(rows.begin(), rows.end(), [](int32_t m) { return m > 0; }));
  if (groups == 0) return;
  // The pointer arrays, each `groups` long: cuBLAS's A (op(B_e)^T), B (A_e^T) and C (C_e^T).
  host_pointers_.resize(3 * groups);
  n_.clear();
  int64_t offset = 0;
  size_t g = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    const int64_t m = rows[e];
    if (m > 0) {
      host_pointers_[g] = b + static_cast<int64_t>(e) * b_stride;
      host_pointers_[groups + g] = a + offset * k;
      host_pointers_[2 * groups + g] = c + offset * n;
      n_.push_back(static_cast<int>(m));
      ++g;
    }
    offset += m;
  }
  // Everything but the rows is the same for every expert.
  ta_.assign(groups, tb == Trans::transpose ? CUBLAS_OP_T : CUBLAS_OP_N);
  tb_.assign(groups, CUBLAS_OP_N);
  m_.assign(groups, static_cast<int>(n));
  k_.assign(groups, static_cast<int>(k));
  lda_.assign(groups, static_cast<int>(tb == Trans::transpose ? k : n));
  ldb_.assign(groups, static_cast<int>(k));
  ldc_.assign(groups, static_cast<int>(n));
  sizes_.assign(groups, 1);
  alpha_.assign(groups, 1.0f);
  beta_.assign(groups, 0.0f);
  if (groups > capacity_) {
    if (pointers_) MOESIM_CUDA_CHECK(cudaFree(pointers_));
    pointers_ = nullptr;
    MOESIM_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&pointers_), 3 * groups * sizeof(void*)));
    capacity_ = groups;
  }
  // From pageable memory: the call returns once the source is staged, so the vectors may change.
  MOESIM_CUDA_CHECK(cudaMemcpyAsync(pointers_, host_pointers_.data(), 3 * groups * sizeof(void*),
                                    cudaMemcpyHostToDevice, stream));
  MOESIM_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  MOESIM_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      handle_, ta_.data(), tb_.data(), m_.data(), n_.data(), k_.data(), alpha_.data(), pointers_, CUDA_R_16BF,
      lda_.data(), pointers_ + groups, CUDA_R_16BF, ldb_.data(), beta_.data(), pointers_ + 2 * groups, CUDA_R_16BF,
      ldc_.data(), static_cast<int>(groups), sizes_.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace moesim::cuda
