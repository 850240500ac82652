// SPDX-License-Identifier: MIT
// cuDNN fused SDPA: the forward and backward operation graphs and the per-shape plan cache; see
// sdpa.hpp. The graphs are the composite pattern cuDNN's fused flash-attention engine matches
// (the one cuDNN's own frontend emits for BF16 causal SDPA on cuDNN 9.x), written against the
// backend API through cudnn_graph.hpp:
//
//   forward:  S = Q K^T (FP32) -> * scale -> causal mask (row >= col, else -inf) -> softmax, whose
//             statistics M + log(sum exp(S - M)) are the lse output -> P (BF16) -> O = P V.
//   backward: D = rowsum(dO * O) (FP32 scratch); P = exp(scale S - lse) under the same mask;
//             dV = P^T dO; dS = P * (dO V^T - D) * scale; dK = dS^T Q; dQ = dS K (FP32 accumulator
//             in the scratch, then cast to BF16). With GQA the per-query-head dK, dV are summed
//             over each key/value head's group by a reduction.
// The matmuls see K (and V in the backward) through transposed strides, never a copy.
#include "backend/cuda/attention/sdpa.hpp"

#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>
#include <utility>

#include "backend/cuda/check.hpp"

#if MOESIM_HAVE_CUDNN
#include "backend/cuda/attention/cudnn_graph.hpp"
#include "backend/cuda/attention/cudnn_lib.hpp"
#endif

namespace moesim::cuda {

namespace {

// Why cuDNN's fused attention cannot take `s` (Hopper: head dims multiples of 8 up to 256), or null.
const char* unsupported(const SdpaShape& s) {
  if (s.batch < 1 || s.seq < 2 || s.heads_q < 1 || s.heads_kv < 1) return "batch, heads must be >= 1 and seq >= 2";
  if (s.heads_q % s.heads_kv != 0) return "heads_q must be a multiple of heads_kv";
  for (int64_t d : {s.head_dim_qk, s.head_dim_v}) {
    if (d < 8 || d > 256 || d % 8 != 0) return "head dims must be multiples of 8 up to 256";
  }
  // Sizes as cuDNN's int64 dims take them, and the executor's scratch arithmetic.
  if (s.seq > (int64_t{1} << 24) || s.heads_q > 4096 || s.batch > 65535) return "shape too large";
  return nullptr;
}

}  // namespace

bool sdpa_shape_supported(const SdpaShape& s) { return unsupported(s) == nullptr; }

void sdpa_check_shape(const SdpaShape& s) {
  if (const char* why = unsupported(s)) throw std::invalid_argument(std::string("SDPA: ") + why);
}

size_t sdpa_backward_scratch_bytes(const SdpaShape& s) {
  sdpa_check_shape(s);
  const auto rows = static_cast<size_t>(s.batch * s.heads_q * s.seq);
  const size_t softmax_sum = rows * sizeof(float);
  const size_t dq_accum = rows * static_cast<size_t>(s.head_dim_qk) * sizeof(float);
  return (softmax_sum + 255) / 256 * 256 + dq_accum;  // dq accumulator 256-byte aligned after the sums
}

KernelCost sdpa_forward_cost(const SdpaShape& s) {
  const double pairs = static_cast<double>(s.batch) * causal_pairs(s.seq, s.seq);
  const double tq = static_cast<double>(s.batch * s.seq * s.heads_q);
  const double tk = static_cast<double>(s.batch * s.seq * s.heads_kv);
  const double dqk = static_cast<double>(s.head_dim_qk), dv = static_cast<double>(s.head_dim_v);
  KernelCost c;
  c.flops = 2.0 * static_cast<double>(s.heads_q) * (dqk + dv) * pairs;
  c.bytes = tq * dqk * 2 + tk * (dqk + dv) * 2 + tq * (dv * 2 + 4);  // q, k, v in; o, lse out
  return c;
}

KernelCost sdpa_backward_cost(const SdpaShape& s) {
  const double tq = static_cast<double>(s.batch * s.seq * s.heads_q);
  const double tk = static_cast<double>(s.batch * s.seq * s.heads_kv);
  const double dqk = static_cast<double>(s.head_dim_qk), dv = static_cast<double>(s.head_dim_v);
  KernelCost c;
  c.flops = 2 * sdpa_forward_cost(s).flops;
  // q, k, v, o, do and lse in; dq, dk, dv out (all BF16 but lse).
  c.bytes = tq * (dqk + 2 * dv) * 2 + tq * 4 + tk * (dqk + dv) * 2 + tq * dqk * 2 + tk * (dqk + dv) * 2;
  return c;
}

#if MOESIM_HAVE_CUDNN

namespace {

using cudnn::Dims;
using cudnn::GraphBuilder;
using cudnn::Plan;
using cudnn::TensorRef;

// Tensor ids bound at execution.
enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kStats,
  kScale,
  kNegInf,
  kOne,
  kDO,
  kDQ,
  kDK,
  kDV,
  kSoftmaxSum,
  kDQAccum,
};

// Strides of a [B, T, H, D] buffer seen as dims [B, H, T, D].
Dims bshd(int64_t t, int64_t h, int64_t d) { return {t * h * d, d, h * d, 1}; }
// ... and seen transposed, as dims [B, H, D, T].
Dims bshd_t(int64_t t, int64_t h, int64_t d) { return {t * h * d, d, 1, h * d}; }

// The shapes every graph uses.
struct Geometry {
  int64_t b, t, hq, hk, dqk, dv;
  explicit Geometry(const SdpaShape& s)
      : b(s.batch), t(s.seq), hq(s.heads_q), hk(s.heads_kv), dqk(s.head_dim_qk), dv(s.head_dim_v) {}
  Dims scores() const { return {b, hq, t, t}; }
  Dims scores_strides() const { return {hq * t * t, t * t, t, 1}; }
  Dims scores_t_strides() const { return {hq * t * t, t * t, 1, t}; }  // the same elements, transposed
  Dims rows() const { return {b, hq, t, 1}; }
  Dims rows_strides() const { return {hq * t, t, 1, 1}; }
};

// x with every (query, key) pair above the diagonal (key after query) replaced by `neg_inf`.
TensorRef causal_mask(GraphBuilder& g, const Geometry& m, TensorRef x, TensorRef neg_inf) {
  const TensorRef row = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, row, CUDNN_DATA_FLOAT, std::nullopt, std::nullopt, 2);
  const TensorRef col = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_INT32);
  g.pointwise(CUDNN_POINTWISE_GEN_INDEX, x, col, CUDNN_DATA_FLOAT, std::nullopt, std::nullopt, 3);
  const TensorRef keep = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_BOOLEAN);
  g.pointwise(CUDNN_POINTWISE_CMP_GE, row, keep, CUDNN_DATA_BOOLEAN, col);
  const TensorRef y = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_BINARY_SELECT, x, y, CUDNN_DATA_FLOAT, neg_inf, keep);
  return y;
}

std::string shape_name(const SdpaShape& s) {
  return "B" + std::to_string(s.batch) + " T" + std::to_string(s.seq) + " Hq" + std::to_string(s.heads_q) + " Hkv" +
         std::to_string(s.heads_kv) + " dqk" + std::to_string(s.head_dim_qk) + " dv" + std::to_string(s.head_dim_v);
}

Plan build_forward(cudnnHandle_t handle, const SdpaShape& s) {
  const Geometry m(s);
  GraphBuilder g;
  const TensorRef q = g.io(kQ, {m.b, m.hq, m.t, m.dqk}, bshd(m.t, m.hq, m.dqk), CUDNN_DATA_BFLOAT16);
  const TensorRef kt = g.io(kK, {m.b, m.hk, m.dqk, m.t}, bshd_t(m.t, m.hk, m.dqk), CUDNN_DATA_BFLOAT16);
  const TensorRef v = g.io(kV, {m.b, m.hk, m.t, m.dv}, bshd(m.t, m.hk, m.dv), CUDNN_DATA_BFLOAT16);
  const TensorRef o = g.io(kO, {m.b, m.hq, m.t, m.dv}, bshd(m.t, m.hq, m.dv), CUDNN_DATA_BFLOAT16);
  const TensorRef stats = g.io(kStats, m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  const TensorRef scale = g.scalar(kScale);
  const TensorRef neg_inf = g.scalar(kNegInf);

  const TensorRef s_raw = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.matmul(q, kt, s_raw);
  const TensorRef s_scaled = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, s_raw, s_scaled, CUDNN_DATA_FLOAT, scale);
  const TensorRef s_masked = causal_mask(g, m, s_scaled, neg_inf);
  // Softmax with its statistics.
  const TensorRef row_max = g.virt(m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, s_masked, row_max);
  const TensorRef centred = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, s_masked, centred, CUDNN_DATA_FLOAT, row_max);
  const TensorRef e = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, e);
  const TensorRef row_sum = g.virt(m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, row_sum);
  const TensorRef log_sum = g.virt(m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_LOG, row_sum, log_sum);
  g.pointwise(CUDNN_POINTWISE_ADD, row_max, stats, CUDNN_DATA_FLOAT, log_sum);
  const TensorRef p = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_BFLOAT16);
  g.pointwise(CUDNN_POINTWISE_DIV, e, p, CUDNN_DATA_FLOAT, row_sum);
  g.matmul(p, v, o);
  return g.build(handle, "SDPA forward " + shape_name(s));
}

Plan build_backward(cudnnHandle_t handle, const SdpaShape& s) {
  const Geometry m(s);
  GraphBuilder g;
  const TensorRef q = g.io(kQ, {m.b, m.hq, m.t, m.dqk}, bshd(m.t, m.hq, m.dqk), CUDNN_DATA_BFLOAT16);
  const TensorRef kt = g.io(kK, {m.b, m.hk, m.dqk, m.t}, bshd_t(m.t, m.hk, m.dqk), CUDNN_DATA_BFLOAT16);
  const TensorRef vt = g.io(kV, {m.b, m.hk, m.dv, m.t}, bshd_t(m.t, m.hk, m.dv), CUDNN_DATA_BFLOAT16);
  const TensorRef o = g.io(kO, {m.b, m.hq, m.t, m.dv}, bshd(m.t, m.hq, m.dv), CUDNN_DATA_BFLOAT16);
  const TensorRef d_o = g.io(kDO, {m.b, m.hq, m.t, m.dv}, bshd(m.t, m.hq, m.dv), CUDNN_DATA_BFLOAT16);
  const TensorRef stats = g.io(kStats, m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  const TensorRef dq = g.io(kDQ, {m.b, m.hq, m.t, m.dqk}, bshd(m.t, m.hq, m.dqk), CUDNN_DATA_BFLOAT16);
  const TensorRef dk = g.io(kDK, {m.b, m.hk, m.t, m.dqk}, bshd(m.t, m.hk, m.dqk), CUDNN_DATA_BFLOAT16);
  const TensorRef dv = g.io(kDV, {m.b, m.hk, m.t, m.dv}, bshd(m.t, m.hk, m.dv), CUDNN_DATA_BFLOAT16);
  const TensorRef softmax_sum = g.io(kSoftmaxSum, m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  const TensorRef dq_accum =
      g.io(kDQAccum, {m.b, m.hq, m.t, m.dqk}, {m.hq * m.t * m.dqk, m.t * m.dqk, m.dqk, 1}, CUDNN_DATA_FLOAT);
  const TensorRef scale = g.scalar(kScale);
  const TensorRef neg_inf = g.scalar(kNegInf);
  const TensorRef one = g.scalar(kOne);

  // D = rowsum(dO * O), kept in the scratch.
  const TensorRef do_o = g.virt({m.b, m.hq, m.t, m.dv}, bshd(m.t, m.hq, m.dv), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, d_o, do_o, CUDNN_DATA_FLOAT, o);
  const TensorRef d_rows = g.virt(m.rows(), m.rows_strides(), CUDNN_DATA_FLOAT);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, do_o, d_rows);
  g.pointwise(CUDNN_POINTWISE_MUL, d_rows, softmax_sum, CUDNN_DATA_FLOAT, one);

  // P = exp(scale * Q K^T - lse) under the causal mask.
  const TensorRef s_raw = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.matmul(q, kt, s_raw);
  const TensorRef s_scaled = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, s_raw, s_scaled, CUDNN_DATA_FLOAT, scale);
  const TensorRef s_centred = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, s_scaled, s_centred, CUDNN_DATA_FLOAT, stats);
  const TensorRef s_masked = causal_mask(g, m, s_centred, neg_inf);
  const TensorRef p = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_EXP, s_masked, p);

  // dV = P^T dO, per query head, then summed over each key/value head's group.
  const Dims kv_full_v = {m.b, m.hq, m.t, m.dv}, kv_full_v_strides = {m.hq * m.t * m.dv, m.t * m.dv, m.dv, 1};
  const TensorRef p_t = g.virt(m.scores(), m.scores_t_strides(), CUDNN_DATA_BFLOAT16);
  g.reshape(p, p_t);
  if (m.hq == m.hk) {
    g.matmul(p_t, d_o, dv);
  } else {
    const TensorRef dv_full = g.virt(kv_full_v, kv_full_v_strides, CUDNN_DATA_BFLOAT16);
    g.matmul(p_t, d_o, dv_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dv_full, dv);
  }

  // dS = P * (dO V^T - D) * scale.
  const TensorRef dp = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.matmul(d_o, vt, dp);
  const TensorRef dp_centred = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_SUB, dp, dp_centred, CUDNN_DATA_FLOAT, softmax_sum);
  const TensorRef ds_unscaled = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, dp_centred, ds_unscaled, CUDNN_DATA_FLOAT, p);
  const TensorRef ds = g.virt(m.scores(), m.scores_strides(), CUDNN_DATA_FLOAT);
  g.pointwise(CUDNN_POINTWISE_MUL, ds_unscaled, ds, CUDNN_DATA_FLOAT, scale);

  // dK = dS^T Q (grouped as dV).
  const TensorRef ds_t = g.virt(m.scores(), m.scores_t_strides(), CUDNN_DATA_BFLOAT16);
  g.reshape(ds, ds_t);
  if (m.hq == m.hk) {
    g.matmul(ds_t, q, dk);
  } else {
    const TensorRef dk_full =
        g.virt({m.b, m.hq, m.t, m.dqk}, {m.hq * m.t * m.dqk, m.t * m.dqk, m.dqk, 1}, CUDNN_DATA_BFLOAT16);
    g.matmul(ds_t, q, dk_full);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, dk_full, dk);
  }

  // dQ = dS K, accumulated in FP32, then cast.
  const TensorRef k = g.virt({m.b, m.hk, m.t, m.dqk}, bshd(m.t, m.hk, m.dqk), CUDNN_DATA_BFLOAT16);
  g.reshape(kt, k);
  g.matmul(ds, k, dq_accum);
  g.pointwise(CUDNN_POINTWISE_IDENTITY, dq_accum, dq);
  return g.build(handle, "SDPA backward " + shape_name(s));
}

// The cuDNN 9.14 / 9.15 backward needs the key length a multiple of 128 (see sdpa.hpp).
bool backward_supported_by(size_t version, const SdpaShape& s) { return version > 91500 || s.seq % 128 == 0; }

}  // namespace

struct Sdpa::Impl {
  cudnnHandle_t handle = nullptr;
  using Key = std::tuple<bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>;  // (backward, shape)
  std::map<Key, Plan> plans;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;

  const Plan& plan(bool backward, const SdpaShape& s) {
    const Key key{backward, s.batch, s.seq, s.heads_q, s.heads_kv, s.head_dim_qk, s.head_dim_v};
    auto it = plans.find(key);
    if (it != plans.end()) return it->second;
    Plan p = backward ? build_backward(handle, s) : build_forward(handle, s);
    if (p.workspace_bytes() > workspace_bytes) {
      if (workspace != nullptr) {
        MOESIM_CUDA_CHECK(cudaDeviceSynchronize());  // earlier launches may still use it
        MOESIM_CUDA_CHECK(cudaFree(workspace));
        workspace = nullptr;
        workspace_bytes = 0;
      }
      MOESIM_CUDA_CHECK(cudaMalloc(&workspace, p.workspace_bytes()));
      workspace_bytes = p.workspace_bytes();
    }
    return plans.emplace(key, std::move(p)).first->second;
  }
};

Sdpa::Sdpa() : impl_(std::make_unique<Impl>()) {
  MOESIM_CUDNN_CHECK(cudnn::api().create(&impl_->handle));
}

Sdpa::~Sdpa() {
  impl_->plans.clear();
  if (impl_->workspace != nullptr) (void)cudaFree(impl_->workspace);
  if (impl_->handle != nullptr) (void)cudnn::api().destroy(impl_->handle);
}

void Sdpa::forward(const SdpaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, float scale,
                   bf16_bits* o, float* lse, cudaStream_t stream) {
  sdpa_check_shape(s);
  const Plan& p = impl_->plan(false, s);
  float scale_v = scale, neg_inf = -std::numeric_limits<float>::infinity();
  const int64_t uids[] = {kQ, kK, kV, kO, kStats, kScale, kNegInf};
  void* const ptrs[] = {const_cast<bf16_bits*>(q), const_cast<bf16_bits*>(k), const_cast<bf16_bits*>(v), o, lse,
                        &scale_v, &neg_inf};
  MOESIM_CUDNN_CHECK(cudnn::api().set_stream(impl_->handle, stream));
  p.execute(impl_->handle, uids, ptrs, impl_->workspace);
}

void Sdpa::backward(const SdpaShape& s, const bf16_bits* q, const bf16_bits* k, const bf16_bits* v, const bf16_bits* o,
                    const float* lse, const bf16_bits* d_o, float scale, bf16_bits* dq, bf16_bits* dk, bf16_bits* dv,
                    void* scratch, cudaStream_t stream) {
  sdpa_check_shape(s);
  if (!backward_supported_by(cudnn::api().version, s)) {
    throw std::invalid_argument("SDPA backward: cuDNN " + std::to_string(cudnn::api().version) +
                                " needs seq a multiple of 128 (got " + std::to_string(s.seq) + ")");
  }
  const Plan& p = impl_->plan(true, s);
  auto* softmax_sum = static_cast<char*>(scratch);
  const size_t sums = static_cast<size_t>(s.batch * s.heads_q * s.seq) * sizeof(float);
  char* dq_accum = softmax_sum + (sums + 255) / 256 * 256;
  float scale_v = scale, neg_inf = -std::numeric_limits<float>::infinity(), one = 1.0f;
  const int64_t uids[] = {kQ, kK, kV, kO, kStats, kDO, kDQ, kDK, kDV, kSoftmaxSum, kDQAccum, kScale, kNegInf, kOne};
  void* const ptrs[] = {const_cast<bf16_bits*>(q), const_cast<bf16_bits*>(k), const_cast<bf16_bits*>(v),
                        const_cast<bf16_bits*>(o), const_cast<float*>(lse), const_cast<bf16_bits*>(d_o),
                        dq, dk, dv, softmax_sum, dq_accum, &scale_v, &neg_inf, &one};
  MOESIM_CUDNN_CHECK(cudnn::api().set_stream(impl_->handle, stream));
  p.execute(impl_->handle, uids, ptrs, impl_->workspace);
}

size_t Sdpa::num_plans() const { return impl_->plans.size(); }
size_t Sdpa::workspace_bytes() const { return impl_->workspace_bytes; }

std::string Sdpa::describe_plans() const {
  std::string out;
  for (const auto& [key, plan] : impl_->plans) {
    const auto& [backward, b, t, hq, hk, dqk, dv] = key;
    out += std::string(backward ? "bwd " : "fwd ") + shape_name(SdpaShape{b, t, hq, hk, dqk, dv}) + ": engine " +
           std::to_string(plan.engine_index()) + ", workspace " + std::to_string(plan.workspace_bytes()) + " B\n";
  }
  return out;
}

bool sdpa_backward_supported(const SdpaShape& s) {
  if (!cudnn::available() || !sdpa_shape_supported(s)) return false;
  return backward_supported_by(cudnn::api().version, s);
}

bool cudnn_sdpa_available(std::string* why) { return cudnn::available(why); }
size_t cudnn_sdpa_version() { return cudnn::available() ? cudnn::api().version : 0; }

#else  // built without cuDNN

namespace {
[[noreturn]] void no_cudnn() {
  throw BackendError("cuDNN SDPA: this build has no cuDNN (cudnn_backend.h was not found at configure time)");
}
}  // namespace

struct Sdpa::Impl {};
Sdpa::Sdpa() { no_cudnn(); }
Sdpa::~Sdpa() = default;
void Sdpa::forward(const SdpaShape&, const bf16_bits*, const bf16_bits*, const bf16_bits*, float, bf16_bits*, float*,
                   cudaStream_t) {
  no_cudnn();
}
void Sdpa::backward(const SdpaShape&, const bf16_bits*, const bf16_bits*, const bf16_bits*, const bf16_bits*, const float*,
                    const bf16_bits*, float, bf16_bits*, bf16_bits*, bf16_bits*, void*, cudaStream_t) {
  no_cudnn();
}
size_t Sdpa::num_plans() const { return 0; }
size_t Sdpa::workspace_bytes() const { return 0; }
std::string Sdpa::describe_plans() const { return {}; }
bool sdpa_backward_supported(const SdpaShape&) { return false; }
size_t cudnn_sdpa_version() { return 0; }
bool cudnn_sdpa_available(std::string* why) {
  if (why != nullptr) *why = "this build has no cuDNN (cudnn_backend.h was not found at configure time)";
  return false;
}

#endif

}  // namespace moesim::cuda
