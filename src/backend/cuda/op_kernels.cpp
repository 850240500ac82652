// SPDX-License-Identifier: MIT
#include "backend/cuda/op_kernels.hpp"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>

#include "backend/cuda/attention/dsa.hpp"
#include "backend/cuda/attention/kda.hpp"
#include "backend/cuda/attention/mla_attention.hpp"
#include "backend/cuda/attention/sdpa.hpp"
#include "backend/cuda/check.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/host_copy.hpp"
#include "backend/cuda/kernels.hpp"

namespace moesim::cuda {

void* Arena::take_bytes(size_t bytes) {
  constexpr size_t kAlign = 256;
  const size_t at = (used_ + kAlign - 1) / kAlign * kAlign;
  used_ = at + bytes;
  high_ = std::max(high_, used_);
  if (base_ == nullptr) return nullptr;
  if (used_ > size_) {
    throw BackendError("executor arena overflow: " + std::to_string(used_) + " bytes of " + std::to_string(size_) +
                       " (the dry run sized it too small)");
  }
  return base_ + at;
}

RoutingPlan build_routing_plan(const StepGraph& g, int64_t rank, int64_t step) {
  RoutingPlan plan;
  if (!g.routing) return plan;
  const RoutingSampler& rs = *g.routing;
  const int64_t ep = g.plan.group_size(GroupKind::ep);
  const int64_t me = g.plan.group_rank(rank, GroupKind::ep);
  const int64_t t = g.routed_tokens_per_micro_batch();
  const int64_t local = rs.experts_per_rank();
  for (const Program& p : g.programs) {
    for (const Op& op : p.ops) {
      if (op.routing_layer < 0) continue;
      auto [it, inserted] = plan.try_emplace({op.routing_layer, op.micro});
      if (!inserted) continue;
      RoutingSlice& s = it->second;
      s.send_rows.assign(static_cast<size_t>(ep), 0);
      s.recv_rows.assign(static_cast<size_t>(ep), 0);
      s.rows_per_expert.assign(static_cast<size_t>(local), 0);
      int64_t received = 0;
      const int64_t capacity = rs.expert_capacity(t);
      if (capacity >= 0 && rs.spec().capacity_policy == CapacityPolicy::pad) {
        // Padding (the engine's ExpertLoads::group_routing): every expert C rows, fixed buffers of
        // E/ep x C / ep rows to and from each peer, whatever the draw.
        const int64_t padded = local * capacity;
        for (int64_t q = 0; q < ep; ++q) {
          const int64_t block = padded / ep + (q < padded % ep ? 1 : 0);
          s.send_rows[static_cast<size_t>(q)] = s.recv_rows[static_cast<size_t>(q)] = block;
        }
        s.rows_per_expert.assign(static_cast<size_t>(local), static_cast<int32_t>(capacity));
        continue;
      }
      if (ep == 1) {
        received = t * rs.top_k();
        s.send_rows[0] = s.recv_rows[0] = received;
        for (int64_t e = 0; e < local; ++e) {
          s.rows_per_expert[static_cast<size_t>(e)] = static_cast<int32_t>(received / local + (e < received % local ? 1 : 0));
        }
        continue;
      }
      if (ep == 2) {
        // The engine's draw (engine/expert_loads.cpp, group_routing): per member, rows received and kept.
        std::vector<int64_t> recv(2), kept(2);
        rs.sample_group_loads(step, op.routing_layer, op.micro, g.plan.group_id(rank, GroupKind::ep), t, recv, kept);
        const auto other = static_cast<size_t>(1 - me);
        const auto self = static_cast<size_t>(me);
        s.send_rows[self] = s.recv_rows[self] = kept[self];
        s.recv_rows[other] = recv[self] - kept[self];
        s.send_rows[other] = recv[other] - kept[other];
        received = recv[self];
      } else {
        // Consistent per-pair counts: every sender's draw, the same on every rank.
        std::vector<int64_t> out(static_cast<size_t>(ep));
        for (int64_t q = 0; q < ep; ++q) {
          const int64_t sender = g.plan.member(rank, GroupKind::ep, q);
          rs.sample_send_counts(step, op.routing_layer, op.micro, sender, t, out);
          s.recv_rows[static_cast<size_t>(q)] = out[static_cast<size_t>(me)];
          if (q == me) s.send_rows = out;
        }
        for (int64_t v : s.recv_rows) received += v;
      }
      std::vector<int64_t> split(static_cast<size_t>(local));
      rs.sample_local_expert_counts(step, op.routing_layer, op.micro, rank, me, received, split);
      for (int64_t e = 0; e < local; ++e) s.rows_per_expert[static_cast<size_t>(e)] = static_cast<int32_t>(split[static_cast<size_t>(e)]);
    }
  }
  return plan;
}

size_t pinned_bytes_needed(const Program& p) {
  double most = 0;
  for (const Op& op : p.ops) {
    if (op.kind == OpKind::swap_in || op.kind == OpKind::swap_out) most = std::max(most, op.comm_bytes);
  }
  return static_cast<size_t>(most);
}

namespace {

[[noreturn]] void no_kernel(const Program& p, const Op& op, const std::string& why) {
  throw BackendError("no kernel for op '" + p.name_of(op) + "' (kind " + std::string(enum_name(op.kind)) + ", phase " +
                     std::string(enum_name(op.phase)) + "): " + why);
}

int64_t cols_of(const TensorDesc& d) { return d.shape[1] > 0 ? d.shape[1] : 1; }
int64_t elements(std::span<const TensorDesc> ds) {
  int64_t n = 0;
  for (const TensorDesc& d : ds) n += d.num_elements();
  return n;
}

ncclDataType_t nccl_type(Dtype d) {
  switch (d) {
    case Dtype::fp32: return ncclFloat32;
    case Dtype::fp16: return ncclFloat16;
    case Dtype::fp8: return ncclUint8;
    case Dtype::int8: return ncclInt8;
    case Dtype::int32: return ncclInt32;
    case Dtype::bf16:
    case Dtype::tf32:
    case Dtype::fp4:
    case Dtype::int4: return ncclBfloat16;
  }
  return ncclBfloat16;  // unreachable: every Dtype is listed above
}

// The launches by family. Each takes its operands from the arenas, then launches unless dry.
class Launcher {
 public:
  Launcher(OpEnv& env, const Program& p, const Op& op) : e_(env), p_(p), op_(op) {}

  void run() {
    switch (op_.kind) {
      case OpKind::gemm:
      case OpKind::lora_gemm: return op_.num_groups > 0 && op_.routing_layer >= 0 ? grouped() : gemm();
      case OpKind::grouped_gemm: return grouped();
      case OpKind::router: return router();
      case OpKind::norm: return norm();
      case OpKind::activation: return activation();
      case OpKind::elementwise: return elementwise();
      case OpKind::grad_accumulate:
      case OpKind::dp_copy: return data_parallel_copy();
      case OpKind::embedding: return embedding();
      case OpKind::short_conv: return short_conv();
      case OpKind::attention_residual: return attention_residual();
      case OpKind::permute: return permute();
      case OpKind::unpermute: return unpermute();
      case OpKind::kda: return kda();
      case OpKind::flash_attention: return gqa_layer() ? gqa() : mla();
      case OpKind::dsa_indexer:
      case OpKind::indexer_score: return indexer();
      case OpKind::topk: return topk();
      case OpKind::kv_gather: return kv_gather();
      case OpKind::sparse_attention: return sparse_attention();
      case OpKind::cce_loss: return cce();
      case OpKind::cross_entropy: return cross_entropy_op();
      case OpKind::optimizer: return optimizer();
      case OpKind::swap_out:
      case OpKind::swap_in: return swap();
      case OpKind::all_gather:
      case OpKind::reduce_scatter:
      case OpKind::all_reduce: return collective();
      case OpKind::all_to_all: return all_to_all();
      case OpKind::send:
      case OpKind::recv: return p2p();
      case OpKind::kda_gate_cumsum:
      case OpKind::kda_intra_chunk:
      case OpKind::kda_inter_chunk:
      case OpKind::kda_output:
        no_kernel(p_, op_, "the unfused KDA stages have no kernels; set fused_ops.kda");
      case OpKind::kda_state_correction: no_kernel(p_, op_, "KDA context parallelism has no kernel");
      case OpKind::host_optimizer: no_kernel(p_, op_, "CPU offload (parallel.fsdp.offload) is simulated only");
    }
    no_kernel(p_, op_, "unknown kind");
  }

 private:
  bool live() const { return !e_.dry; }
  bool bwd() const { return op_.phase == Phase::bwd; }
  cudaStream_t s() const { return e_.stream; }
  template <class T>
  T* in(int64_t n) { return e_.in->take<T>(n); }
  template <class T>
  T* out(int64_t n) { return e_.out->take<T>(n); }
  const ModelSpec& model() const { return *e_.model; }
  int64_t tp() const { return e_.graph->plan.group_size(GroupKind::tp); }
  // Sequences in the op's tokens (attention kernels take [batch, seq]).
  std::pair<int64_t, int64_t> batch_seq(int64_t tokens) const {
    const int64_t seq = std::max<int64_t>(1, std::min(e_.graph->seq_len, tokens));
    return {std::max<int64_t>(1, tokens / seq), seq};
  }
  void run_gemm(const GemmShape& sh, const void* a, const void* b, void* c, float beta = 0.0f) {
    if (live() && sh.m > 0 && sh.n > 0 && sh.k > 0) e_.gemm->run(sh, a, b, c, 1.0f, beta, s());
  }

  // y = x W^T {m, n, k}; backward: dx = dy W, and dW = dy^T x when the weight trains.
  void gemm() {
    const int64_t m = op_.m, n = op_.n, k = op_.k;
    if (m <= 0 || n <= 0 || k <= 0) no_kernel(p_, op_, "GEMM without a shape (m, n, k)");
    const bool accumulate = op_.kind == OpKind::lora_gemm && op_.num_inputs > 1 && !bwd();  // lora_b adds to the base
    if (!bwd()) {
      auto* x = in<bf16_bits>(m * k);
      auto* w = in<bf16_bits>(n * k);
      auto* y = out<bf16_bits>(m * n);
      run_gemm({m, n, k, Trans::none, Trans::transpose, OutType::bf16}, x, w, y, accumulate ? 1.0f : 0.0f);
      return;
    }
    auto* dy = in<bf16_bits>(m * n);
    auto* w = in<bf16_bits>(n * k);
    auto* x = in<bf16_bits>(m * k);
    auto* dx = out<bf16_bits>(m * k);
    run_gemm({m, k, n, Trans::none, Trans::none, OutType::bf16}, dy, w, dx);
    if (op_.trainable_weight) {
      auto* dw = out<bf16_bits>(n * k);
      run_gemm({n, k, m, Trans::transpose, Trans::none, OutType::bf16}, dy, x, dw);
    }
  }

  // Expert GEMMs over this rank's rows per expert (sampled routing, as the engine's).
  void grouped() {
    const RoutingSlice* r = nullptr;
    if (op_.routing_layer >= 0 && e_.routing) {
      auto it = e_.routing->find({op_.routing_layer, op_.micro});
      if (it != e_.routing->end()) r = &it->second;
    }
    std::vector<int32_t> rows;
    const int64_t groups = std::max<int32_t>(op_.num_groups, 1);
    if (r) {
      rows = r->rows_per_expert;
    } else {
      for (int64_t g = 0; g < groups; ++g) rows.push_back(static_cast<int32_t>(op_.m / groups + (g < op_.m % groups ? 1 : 0)));
    }
    int64_t total = 0;
    for (int32_t v : rows) total += v;
    const int64_t n = op_.n, k = op_.k;
    const auto num = static_cast<int64_t>(rows.size());
    auto* w = in<bf16_bits>(num * n * k);
    if (!bwd()) {
      auto* x = in<bf16_bits>(total * k);
      auto* y = out<bf16_bits>(total * n);
      if (live()) grouped_gemm(*e_.gemm, rows, n, k, Trans::transpose, x, w, n * k, y, s());
      return;
    }
    auto* dy = in<bf16_bits>(total * n);
    auto* x = in<bf16_bits>(total * k);
    auto* dx = out<bf16_bits>(total * k);
    if (live()) grouped_gemm(*e_.gemm, rows, k, n, Trans::none, dy, w, n * k, dx, s());
    if (op_.trainable_weight) {
      // dW_e = dy_e^T x_e, expert by expert.
      auto* dw = out<bf16_bits>(num * n * k);
      int64_t off = 0;
      for (int64_t e = 0; e < num; ++e) {
        const int64_t re = rows[static_cast<size_t>(e)];
        run_gemm({n, k, re, Trans::transpose, Trans::none, OutType::bf16}, dy + off * n, x + off * k, dw + e * n * k);
        off += re;
      }
    }
  }

  // Router: FP32 logits = x Wr^T, then sigmoid/softmax top-k; backward: dx = dlogits Wr.
  // The expert dimension of the GEMMs is padded to a multiple of 8 (cuBLASLt wants 16-byte
  // aligned leading dimensions; 14 experts would not be): at most 7 extra columns of work.
  void router() {
    const int64_t t = op_.m, experts = op_.n, d = op_.k;
    const int64_t padded = (experts + 7) / 8 * 8;
    const auto& moe = *model().moe;
    auto* x = in<bf16_bits>(t * d);
    auto* w = in<bf16_bits>(padded * d);
    if (!bwd()) {
      auto* logits = out<float>(t * padded);
      auto* idx = out<int32_t>(t * moe.top_k);
      auto* weights = out<float>(t * moe.top_k);
      run_gemm({t, padded, d, Trans::none, Trans::transpose, OutType::fp32}, x, w, logits);
      if (live()) {
        router_topk(logits, moe.router.expert_bias ? e_.tables.router_bias : nullptr, t, static_cast<int>(experts),
                    static_cast<int>(moe.top_k),
                    moe.router.score == moesim::RouterScore::sigmoid ? cuda::RouterScore::sigmoid : cuda::RouterScore::softmax,
                    moe.router.normalize_top_k, idx, weights, s());
      }
      return;
    }
    auto* dlogits = in<bf16_bits>(t * padded);
    auto* dx = out<bf16_bits>(t * d);
    run_gemm({t, d, padded, Trans::none, Trans::none, OutType::bf16}, dlogits, w, dx);
    if (op_.trainable_weight) {
      auto* dw = out<bf16_bits>(padded * d);
      run_gemm({padded, d, t, Trans::transpose, Trans::none, OutType::bf16}, dlogits, x, dw);
    }
  }

  // RMSNorm over rows of the op's normalised width, its k (TapeBuilder::norm): the hidden size,
  // or a head's dimension for per-head norms (Qwen3's QK-norm, KDA's gated output norm), whose
  // rows are then (token, head) pairs with one weight of that width.
  void norm() {
    const TensorDesc& xd = bwd() ? p_.outputs(op_).front() : p_.inputs(op_).front();
    int64_t rows = xd.shape[0], cols = cols_of(xd);
    const int64_t width = op_.k > 0 ? op_.k : cols;
    if (cols % width != 0) no_kernel(p_, op_, "the norm's width does not divide its rows");
    rows *= cols / width;
    cols = width;
    const bool gated = (bwd() ? op_.num_outputs : op_.num_inputs) > 1;  // gated norm: norm(o) * gate(g)
    auto* x = in<bf16_bits>(rows * cols);
    auto* w = in<bf16_bits>(cols);
    auto* g = gated ? in<bf16_bits>(rows * cols) : nullptr;
    if (!bwd()) {
      auto* y = out<bf16_bits>(rows * cols);
      auto* rstd = out<float>(rows);
      if (!live()) return;
      rmsnorm_forward(x, w, y, rstd, rows, cols, 1e-6f, s());
      if (gated) add(y, g, y, rows * cols, s());
      return;
    }
    auto* rstd = in<float>(rows);
    auto* dy = in<bf16_bits>(rows * cols);
    auto* dx = out<bf16_bits>(rows * cols);
    auto* dw = out<float>(cols);
    auto* dg = gated ? out<bf16_bits>(rows * cols) : nullptr;
    auto* scratch = out<float>(rmsnorm_backward_scratch_floats(rows, cols));
    if (!live()) return;
    rmsnorm_backward(x, w, rstd, dy, dx, dw, rows, cols, scratch, s());
    if (gated) add(dy, g, dg, rows * cols, s());
  }

  // SwiGLU on the gate|up projection [rows, 2f] -> [rows, f] (the kernel computes silu(gate) * up;
  // SiTU-GLU, K3's activation, runs it as a stand-in of the same cost). Ungated activations have
  // no kernel here.
  void activation() {
    if (!is_gated(model().activation)) {
      no_kernel(p_, op_, "the executor runs gated activations (SwiGLU) only; the model's is " +
                             std::string(enum_name(model().activation)));
    }
    const TensorDesc& yd = bwd() ? p_.inputs(op_).front() : p_.outputs(op_).front();
    const int64_t rows = yd.shape[0], f = cols_of(yd);
    int64_t rows_used = rows;
    if (op_.routing_layer >= 0) rows_used = routed_rows(rows);
    auto* h = in<bf16_bits>(rows_used * 2 * f);
    if (!bwd()) {
      auto* y = out<bf16_bits>(rows_used * f);
      if (live()) swiglu_forward(h, y, rows_used, f, s());
      return;
    }
    auto* dy = in<bf16_bits>(rows_used * f);
    auto* dh = out<bf16_bits>(rows_used * 2 * f);
    if (live()) swiglu_backward(h, dy, dh, rows_used, f, s());
  }

  // The rows the graph built the expert-side buffers at: T k, or the padded buffers under capacity
  // padding (graph/routing.hpp, expected_expert_rows).
  int64_t expert_buffer_rows() const {
    const int64_t t = e_.graph->routed_tokens_per_micro_batch();
    return e_.graph->routing ? e_.graph->routing->expected_rows(t) : t * model().moe->top_k;
  }

  // The expert rows this rank processes in a routed op of `expected` rows.
  int64_t routed_rows(int64_t expected) const {
    if (!e_.routing) return expected;
    auto it = e_.routing->find({op_.routing_layer, op_.micro});
    if (it == e_.routing->end()) return expected;
    int64_t total = 0;
    for (int32_t v : it->second.rows_per_expert) total += v;
    return total;
  }

  // Residual adds and gates: c = a + b on the output's elements; one input: a copy; backward:
  // the gradient passed to each input.
  void elementwise() {
    const int64_t n = p_.outputs(op_).empty() ? 0 : p_.outputs(op_).front().num_elements();
    if (n == 0 && op_.num_inputs == 0 && op_.flops == 0 && op_.bytes_read == 0 && op_.bytes_written == 0) {
      return;  // a bookkeeping op (e.g. embedding.release: frees buffers, no tensors, no work)
    }
    if (n == 0) no_kernel(p_, op_, "elementwise op without an output");
    if (!bwd()) {
      auto* a = in<bf16_bits>(n);
      auto* b = op_.num_inputs > 1 ? in<bf16_bits>(n) : nullptr;
      auto* c = out<bf16_bits>(n);
      if (!live()) return;
      if (b) add(a, b, c, n, s()); else copy(a, c, n, s());
      return;
    }
    auto* dy = in<bf16_bits>(n);
    auto* other = op_.num_inputs > 1 ? in<bf16_bits>(n) : nullptr;  // the saved input a gate's gradient reads
    for (const TensorDesc& o : p_.outputs(op_)) {
      auto* dx = out<bf16_bits>(o.num_elements());
      if (!live()) continue;
      if (other) add(dy, other, dx, std::min(n, o.num_elements()), s()); else copy(dy, dx, std::min(n, o.num_elements()), s());
    }
  }

  // FSDP2's copies and gradient accumulations: the graph keeps their parts' formats only as the
  // bytes they read and write (its tensors, step_graph.cpp's dp_copy), and this moves exactly those.
  void data_parallel_copy() {
    if (op_.num_inputs == 0 || op_.num_outputs == 0) no_kernel(p_, op_, "a data-parallel copy needs its input and output tensors");
    const int64_t n_in = p_.inputs(op_).front().num_elements();
    const int64_t n_out = p_.outputs(op_).front().num_elements();
    auto* a = in<bf16_bits>(n_in);
    auto* c = out<bf16_bits>(n_out);
    if (live()) exec_kernels::move_bytes(a, n_in, c, n_out, s());
  }

  void embedding() {
    if (bwd()) {
      // The table's gradient [vocab, d] in FP32, accumulated row by row from the output gradient.
      const TensorDesc& dy_desc = p_.inputs(op_).front();
      const int64_t rows = dy_desc.shape[0], d = cols_of(dy_desc), vocab = model().vocab_size;
      auto* dy = in<bf16_bits>(rows * d);
      auto* grad = out<float>(vocab * d);
      if (live()) exec_kernels::scatter_add_rows(dy, e_.tables.token_ids, rows, d, vocab, grad, s());
      return;
    }
    const TensorDesc& y = p_.outputs(op_).front();
    const int64_t rows = y.shape[0], d = cols_of(y), vocab = model().vocab_size;
    auto* table = in<bf16_bits>(vocab * d);
    auto* o = out<bf16_bits>(rows * d);
    if (live()) exec_kernels::gather_rows(table, e_.tables.token_ids, rows, d, vocab, o, s());
  }

  // KDA's depthwise causal conv over q|k|v.
  void short_conv() {
    // Forward: one [t, 3p] output; backward: the three [t, p] input gradients. Either way the
    // outputs hold rows x channels.
    const int64_t rows = p_.outputs(op_).front().shape[0];
    const int64_t channels = elements(p_.outputs(op_)) / rows;
    const int width = static_cast<int>(model().kda ? model().kda->short_conv_kernel : 4);
    auto* x = in<bf16_bits>(rows * channels);
    auto* w = in<bf16_bits>(channels * width);
    auto* y = out<bf16_bits>(rows * channels);
    if (live()) exec_kernels::short_conv(x, w, rows, channels, width, bwd(), y, s());
  }

  int sources() const {
    const auto& ar = model().attention_residuals;
    const int64_t block = ar ? ar->block_size : 1;
    return static_cast<int>((op_.layer - 1) / std::max<int64_t>(block, 1) + 2);
  }

  void attention_residual() {
    const TensorDesc& y = p_.outputs(op_).front();  // the mix's output, or its input's gradient: same shape
    const int64_t n = y.num_elements();
    const int src = sources();
    if (!bwd()) {
      auto* x = in<bf16_bits>(n * src);
      auto* o = out<bf16_bits>(n);
      if (live()) exec_kernels::residual_mix(x, e_.tables.mix_weights, src, n, o, s());
      return;
    }
    auto* dy = in<bf16_bits>(n);
    auto* dx = out<bf16_bits>(n * src);
    if (live()) exec_kernels::residual_mix_backward(dy, e_.tables.mix_weights, src, n, dx, s());
  }

  // Token order -> expert order (forward permute, or the unpermute's backward).
  void permute() {
    const auto& moe = *model().moe;
    const int64_t t = e_.graph->routed_tokens_per_micro_batch(), k = moe.top_k;
    const TensorDesc& big = p_.outputs(op_).front();  // [assignments, cols] in expert order
    const int64_t cols = cols_of(big);
    auto* x = in<bf16_bits>(t * cols);
    auto* xp = out<bf16_bits>(expert_buffer_rows() * cols);  // capacity padding: the padded buffer
    if (live()) permute_rows(x, e_.tables.dest_row, t * k, static_cast<int>(k), cols, xp, s());
  }

  // Expert order -> token order with the combine weights (forward), or the permute's backward.
  void unpermute() {
    const auto& moe = *model().moe;
    const int64_t t = e_.graph->routed_tokens_per_micro_batch(), k = moe.top_k;
    const TensorDesc& small = p_.outputs(op_).front();  // [tokens, cols] in token order
    const int64_t cols = cols_of(small);
    auto* yp = in<bf16_bits>(expert_buffer_rows() * cols);
    auto* weights = in<float>(t * k);
    auto* y = out<bf16_bits>(t * cols);
    if (live()) unpermute_combine(yp, e_.tables.dest_row, weights, t, static_cast<int>(k), cols, y, s());
  }

  void kda() {
    if (!model().kda) no_kernel(p_, op_, "the model has no kda block");
    const auto& c = *model().kda;
    const auto [batch, seq] = batch_seq(op_.m);
    KdaShape sh{batch, seq, c.num_heads / tp(), c.head_dim, c.head_dim, c.chunk_size};
    const int64_t th = batch * seq * sh.heads;
    auto* q = in<bf16_bits>(th * sh.head_dim_k);
    auto* k = in<bf16_bits>(th * sh.head_dim_k);
    auto* v = in<bf16_bits>(th * sh.head_dim_v);
    auto* g = in<float>(th * sh.head_dim_k);
    auto* beta = in<float>(th);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim_k));
    if (!bwd()) {
      auto* o = out<bf16_bits>(th * sh.head_dim_v);
      void* ws = e_.out->take_bytes(kda_forward_workspace_bytes(sh));
      if (live()) kda_forward(sh, q, k, v, g, beta, scale, o, ws, s());
      return;
    }
    auto* d_o = in<bf16_bits>(th * sh.head_dim_v);
    auto* dq = out<float>(th * sh.head_dim_k);
    auto* dk = out<float>(th * sh.head_dim_k);
    auto* dv = out<float>(th * sh.head_dim_v);
    auto* dg = out<float>(th * sh.head_dim_k);
    auto* dbeta = out<float>(th);
    void* ws = e_.out->take_bytes(kda_backward_workspace_bytes(sh));
    if (live()) kda_backward(sh, q, k, v, g, beta, d_o, scale, dq, dk, dv, dg, dbeta, ws, s());
  }

  Sdpa& sdpa() const {
    if (e_.sdpa == nullptr) throw BackendError("launch_op: cudnn_attention without an Sdpa (executor bug)");
    return *e_.sdpa;
  }

  // Whether op_ belongs to an MHA / GQA layer (layer_kinds is per 1-based layer).
  bool gqa_layer() const {
    const auto& kinds = model().layer_kinds;
    if (op_.layer < 1 || static_cast<size_t>(op_.layer) > kinds.size() || !model().gqa) return false;
    const AttentionKind a = kinds[static_cast<size_t>(op_.layer - 1)].attention;
    return a == AttentionKind::gqa || a == AttentionKind::mha;
  }

  // Dense causal MHA / GQA core (gqa_block, attention_ops.cpp): q [B, T, Hq, d], k and v
  // [B, T, Hkv, d] with Hq / Hkv query heads per key/value head (per TP rank, as the graph's
  // projections). RoPE has no op of its own in the graph (its cost is folded into the
  // projections), so none runs here. cuDNN's fused SDPA takes the grouping directly. The
  // backend's kernels (no cuDNN) take k with q's heads: k and v are expanded head by head into
  // scratch first, and backward sums the expanded FP32 dk, dv back over each group.
  void gqa() {
    const auto& g = *model().gqa;
    const auto [batch, seq] = batch_seq(op_.m);
    const int64_t hq = g.num_heads / tp(), hkv = std::max<int64_t>(g.num_kv_heads / tp(), 1);
    if (hq % hkv != 0) no_kernel(p_, op_, "query heads are not a multiple of key/value heads");
    const int64_t d = g.head_dim, rows = batch * seq;
    const SdpaShape ss{batch, seq, hq, hkv, d, d};
    const MlaShape sh{batch, seq, hq, d, d};
    auto* q = in<bf16_bits>(rows * hq * d);
    auto* k = in<bf16_bits>(rows * hkv * d);
    auto* v = in<bf16_bits>(rows * hkv * d);
    const float scale = 1.0f / std::sqrt(static_cast<float>(d));
    const bool cudnn = e_.cudnn_attention && sdpa_shape_supported(ss);
    const int group = static_cast<int>(hq / hkv);
    if (!bwd()) {
      auto* o = out<bf16_bits>(rows * hq * d);
      auto* lse = out<float>(rows * hq);
      if (cudnn) {
        if (live()) sdpa().forward(ss, q, k, v, scale, o, lse, s());
        return;
      }
      auto* ke = group > 1 ? out<bf16_bits>(rows * hq * d) : k;
      auto* ve = group > 1 ? out<bf16_bits>(rows * hq * d) : v;
      if (!live()) return;
      if (group > 1) {
        exec_kernels::repeat_kv_heads(k, rows, hkv, group, d, ke, s());
        exec_kernels::repeat_kv_heads(v, rows, hkv, group, d, ve, s());
      }
      mla_forward(sh, q, ke, ve, scale, o, lse, s());
      return;
    }
    auto* o = in<bf16_bits>(rows * hq * d);
    auto* lse = in<float>(rows * hq);
    auto* d_o = in<bf16_bits>(rows * hq * d);
    if (cudnn && sdpa_backward_supported(ss)) {
      auto* dq = out<bf16_bits>(rows * hq * d);
      auto* dk = out<bf16_bits>(rows * hkv * d);
      auto* dv = out<bf16_bits>(rows * hkv * d);
      void* scratch = e_.out->take_bytes(sdpa_backward_scratch_bytes(ss));
      if (live()) sdpa().backward(ss, q, k, v, o, lse, d_o, scale, dq, dk, dv, scratch, s());
      return;
    }
    auto* dq = out<float>(rows * hq * d);
    auto* dk = out<float>(rows * hkv * d);
    auto* dv = out<float>(rows * hkv * d);
    auto* ke = group > 1 ? out<bf16_bits>(rows * hq * d) : k;
    auto* ve = group > 1 ? out<bf16_bits>(rows * hq * d) : v;
    auto* dke = group > 1 ? out<float>(rows * hq * d) : dk;
    auto* dve = group > 1 ? out<float>(rows * hq * d) : dv;
    void* ws = e_.out->take_bytes(mla_backward_workspace_bytes(sh));
    if (!live()) return;
    if (group > 1) {
      exec_kernels::repeat_kv_heads(k, rows, hkv, group, d, ke, s());
      exec_kernels::repeat_kv_heads(v, rows, hkv, group, d, ve, s());
    }
    mla_backward(sh, q, ke, ve, o, lse, d_o, scale, dq, dke, dve, ws, s());
    if (group > 1) {
      exec_kernels::sum_kv_head_groups(dke, rows, hkv, group, d, dk, s());
      exec_kernels::sum_kv_head_groups(dve, rows, hkv, group, d, dv, s());
    }
  }

  // Dense causal MLA core (the kv_b expansion is the caller's: k has q's heads): cuDNN's fused
  // SDPA when the executor has cuDNN, else the backend's own kernels.
  void mla() {
    if (!model().mla) no_kernel(p_, op_, "flash_attention runs the MLA kernels; the model has no mla block");
    const auto& a = *model().mla;
    const auto [batch, seq] = batch_seq(op_.m);
    MlaShape sh{batch, seq, a.num_heads / tp(), a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim};
    const int64_t th = batch * seq * sh.heads;
    auto* q = in<bf16_bits>(th * sh.head_dim_qk);
    auto* k = in<bf16_bits>(th * sh.head_dim_qk);
    auto* v = in<bf16_bits>(th * sh.head_dim_v);
    const float scale = 1.0f / std::sqrt(static_cast<float>(sh.head_dim_qk));
    const SdpaShape ss{batch, seq, sh.heads, sh.heads, sh.head_dim_qk, sh.head_dim_v};
    const bool cudnn = e_.cudnn_attention && sdpa_shape_supported(ss);
    if (!bwd()) {
      auto* o = out<bf16_bits>(th * sh.head_dim_v);
      auto* lse = out<float>(th);
      if (!live()) return;
      if (cudnn) {
        sdpa().forward(ss, q, k, v, scale, o, lse, s());
      } else {
        mla_forward(sh, q, k, v, scale, o, lse, s());
      }
      return;
    }
    if (cudnn && sdpa_backward_supported(ss)) {
      auto* o = in<bf16_bits>(th * sh.head_dim_v);
      auto* lse = in<float>(th);
      auto* d_o = in<bf16_bits>(th * sh.head_dim_v);
      auto* dq = out<bf16_bits>(th * sh.head_dim_qk);
      auto* dk = out<bf16_bits>(th * sh.head_dim_qk);
      auto* dv = out<bf16_bits>(th * sh.head_dim_v);
      void* scratch = e_.out->take_bytes(sdpa_backward_scratch_bytes(ss));
      if (live()) sdpa().backward(ss, q, k, v, o, lse, d_o, scale, dq, dk, dv, scratch, s());
      return;
    }
    auto* o = in<bf16_bits>(th * sh.head_dim_v);
    auto* lse = in<float>(th);
    auto* d_o = in<bf16_bits>(th * sh.head_dim_v);
    auto* dq = out<float>(th * sh.head_dim_qk);
    auto* dk = out<float>(th * sh.head_dim_qk);
    auto* dv = out<float>(th * sh.head_dim_v);
    void* ws = e_.out->take_bytes(mla_backward_workspace_bytes(sh));
    if (live()) mla_backward(sh, q, k, v, o, lse, d_o, scale, dq, dk, dv, ws, s());
  }

  DsaIndexerShape indexer_shape() const {
    if (!model().dsa_indexer) no_kernel(p_, op_, "the model has no dsa_indexer block");
    const auto& ix = *model().dsa_indexer;
    const auto [batch, seq] = batch_seq(op_.m);
    return DsaIndexerShape{batch, seq, ix.num_heads / tp(), ix.head_dim, std::min(ix.top_k, seq)};
  }

  // The lightning indexer: scores, then top-k (the fused op runs both kernels; the backend has
  // no fused LI kernel, so the scores do go through HBM here).
  void indexer() {
    const DsaIndexerShape sh = indexer_shape();
    const int64_t tt = sh.batch * sh.seq;
    auto* q = in<bf16_bits>(tt * sh.heads * sh.head_dim);
    auto* k = in<bf16_bits>(tt * sh.head_dim);
    auto* w = in<float>(tt * sh.heads);
    if (!bwd()) {
      auto* scores = out<float>(sh.batch * sh.seq * sh.seq);
      auto* idx = op_.kind == OpKind::dsa_indexer ? out<int32_t>(tt * sh.top_k) : nullptr;
      if (!live()) return;
      dsa_indexer_scores(sh, q, k, w, scores, s());
      if (idx) dsa_topk(sh, scores, idx, s());
      return;
    }
    auto* d_scores = in<float>(sh.batch * sh.seq * sh.seq);
    auto* dq = out<float>(tt * sh.heads * sh.head_dim);
    auto* dk = out<float>(tt * sh.head_dim);
    auto* dw = out<float>(tt * sh.heads);
    if (live()) dsa_indexer_backward(sh, q, k, w, d_scores, dq, dk, dw, s());
  }

  void topk() {
    if (bwd()) no_kernel(p_, op_, "top-k has no backward");
    const DsaIndexerShape sh = indexer_shape();
    auto* scores = in<float>(sh.batch * sh.seq * sh.seq);
    auto* idx = out<int32_t>(sh.batch * sh.seq * sh.top_k);
    if (live()) dsa_topk(sh, scores, idx, s());
  }

  // Unfused DSA: the selected latents gathered row by row.
  void kv_gather() {
    const TensorDesc& g = bwd() ? p_.inputs(op_).front() : p_.outputs(op_).front();
    const int64_t t = g.shape[0];
    const DsaIndexerShape sh = indexer_shape();
    const int64_t latent = cols_of(g) / std::max<int64_t>(sh.top_k, 1);
    auto* kv = in<bf16_bits>(t * latent);
    auto* o = out<bf16_bits>(t * sh.top_k * latent);
    if (live()) exec_kernels::gather_rows(kv, e_.tables.dsa_keys, t * sh.top_k, latent, t, o, s());
  }

  void sparse_attention() {
    if (!model().mla || !model().dsa_indexer) no_kernel(p_, op_, "sparse attention needs mla and dsa_indexer blocks");
    const auto& a = *model().mla;
    const auto [batch, seq] = batch_seq(op_.m);
    DsaAttentionShape sh{batch, seq, a.num_heads / tp(), a.kv_lora_rank, a.qk_rope_head_dim,
                         std::min(model().dsa_indexer->top_k, seq)};
    const int64_t tt = batch * seq, dq_dim = sh.latent + sh.rope;
    auto* q = in<bf16_bits>(tt * sh.heads * dq_dim);
    auto* kv = in<bf16_bits>(tt * dq_dim);
    const float scale = 1.0f / std::sqrt(static_cast<float>(a.qk_nope_head_dim + a.qk_rope_head_dim));
    if (!bwd()) {
      auto* o = out<bf16_bits>(tt * sh.heads * sh.latent);
      auto* lse = out<float>(tt * sh.heads);
      if (live()) dsa_sparse_forward(sh, q, kv, e_.tables.dsa_keys, scale, o, lse, s());
      return;
    }
    auto* o = in<bf16_bits>(tt * sh.heads * sh.latent);
    auto* lse = in<float>(tt * sh.heads);
    auto* d_o = in<bf16_bits>(tt * sh.heads * sh.latent);
    auto* dq = out<float>(tt * sh.heads * dq_dim);
    auto* dkv = out<float>(tt * dq_dim);
    void* ws = e_.out->take_bytes(dsa_sparse_backward_workspace_bytes(sh));
    if (live()) dsa_sparse_backward(sh, q, kv, e_.tables.dsa_keys, o, lse, d_o, scale, dq, dkv, ws, s());
  }

  // Cut cross-entropy, vocabulary chunk by chunk (num_groups chunks): forward and recompute form
  // each chunk's logits [t, chunk] with a GEMM and reduce them (log-sum-exp); backward forms the
  // chunk's softmax gradient from the recomputed logits and accumulates dh += dlogits W_chunk
  // (and dW when the head trains). The logits live in one [t, chunk] scratch: never the full vocab.
  void cce() {
    const int64_t t = op_.m, vocab = op_.n, d = op_.k;
    const int64_t chunks = std::max<int32_t>(op_.num_groups, 1);
    // Chunk widths rounded up to a multiple of 8 entries (so the last chunk is the narrower one):
    // a [t, chunk] BF16 logits block whose rows are not 16-byte aligned sends cuBLASLt to slow
    // kernels (Qwen3's 151,936 entries in 19 chunks of 7,997 ran 7x slower than 8,000, measured
    // 2026-12-01, docs/calibration/validation.md), where a production CCE pads its tiles.
    const int64_t chunk = ((vocab + chunks - 1) / chunks + 7) / 8 * 8;
    auto* h = in<bf16_bits>(t * d);
    auto* w = in<bf16_bits>(vocab * d);
    auto* logits = out<bf16_bits>(t * chunk);
    auto* loss = out<float>(t);
    bf16_bits* dlogits = bwd() ? out<bf16_bits>(t * chunk) : nullptr;
    bf16_bits* dh = bwd() ? out<bf16_bits>(t * d) : nullptr;
    bf16_bits* dw = bwd() && op_.trainable_weight ? out<bf16_bits>(vocab * d) : nullptr;
    if (vocab - (chunks - 1) * chunk < kChunkTargetRange) {
      no_kernel(p_, op_, "vocabulary chunks below " + std::to_string(kChunkTargetRange) + " entries are not supported");
    }
    if (!live()) return;
    for (int64_t c0 = 0; c0 < vocab; c0 += chunk) {
      const int64_t v = std::min(chunk, vocab - c0);
      if (!bwd()) {
        run_gemm({t, v, d, Trans::none, Trans::transpose, OutType::bf16}, h, w + c0 * d, logits);
        cross_entropy(logits, e_.tables.chunk_targets, t, v, 1.0f / static_cast<float>(t), loss, nullptr, s());
        continue;
      }
      cross_entropy(logits, e_.tables.chunk_targets, t, v, 1.0f / static_cast<float>(t), loss, dlogits, s());
      run_gemm({t, d, v, Trans::none, Trans::none, OutType::bf16}, dlogits, w + c0 * d, dh, c0 == 0 ? 0.0f : 1.0f);
      if (dw) run_gemm({v, d, t, Trans::transpose, Trans::none, OutType::bf16}, dlogits, h, dw + c0 * d);
    }
  }

  // The full (unchunked) loss: the logits already exist; one pass writes loss and gradient.
  void cross_entropy_op() {
    if (op_.num_kernels != 1) {
      no_kernel(p_, op_, "loss.implementation eager is simulated only (the executor's loss is one fused kernel each way)");
    }
    const TensorDesc& l = p_.inputs(op_).front();
    const int64_t rows = l.shape[0], vocab = cols_of(l);
    auto* logits = in<bf16_bits>(rows * vocab);
    auto* loss = out<float>(rows);
    auto* dlogits = bwd() ? out<bf16_bits>(rows * vocab) : nullptr;
    if (live()) cross_entropy(logits, e_.tables.token_ids, rows, vocab, 1.0f / static_cast<float>(rows), loss, dlogits, s());
  }

  // AdamW over the unit's trainable parameters (flops = 12 per parameter, step_graph.cpp), in
  // place on the persistent optimizer state.
  void optimizer() {
    if (op_.num_kernels != 1) {
      no_kernel(p_, op_, "training.optimizer.implementation foreach is simulated only (the executor's AdamW is one fused kernel)");
    }
    const auto n = static_cast<int64_t>(op_.flops / 12.0);
    if (n <= 0) return;
    if (!live()) return;
    OptimizerState& st = *e_.optimizer;
    if (n > st.capacity) {
      throw BackendError("optimizer op '" + p_.name_of(op_) + "' updates " + std::to_string(n) +
                         " parameters, more than the persistent state holds (" + std::to_string(st.capacity) + ")");
    }
    AdamWConfig cfg;
    adamw_step(st.master, st.grad, st.m, st.v, st.param, n, cfg, s());
  }

  void swap() {
    const auto bytes = static_cast<size_t>(op_.comm_bytes);
    void* dev = op_.kind == OpKind::swap_out ? e_.in->take_bytes(bytes) : e_.out->take_bytes(bytes);
    if (!live() || bytes == 0) return;
    if (bytes > e_.pinned_bytes) throw BackendError("swap copy larger than the pinned scratch");
    if (op_.kind == OpKind::swap_out) {
      swap_out(dev, e_.pinned, bytes, s());
    } else {
      swap_in(e_.pinned, dev, bytes, s());
    }
  }

  size_t type_bytes() const { return static_cast<size_t>(dtype_bytes(op_.dtype)); }

  // all-gather: comm_bytes is the gathered size; reduce-scatter: the input size; all-reduce: the
  // buffer (nccl-tests' "size" of each).
  void collective() {
    const GroupComm& c = e_.comm;
    const size_t total = static_cast<size_t>(op_.comm_bytes) / type_bytes();
    const size_t n = static_cast<size_t>(c.size);
    if (c.size <= 1 || total == 0) return;  // a group of one: nothing to exchange (as in the engine)
    const ncclDataType_t type = nccl_type(op_.dtype);
    if (op_.kind == OpKind::all_gather) {
      auto* send = e_.in->take_bytes(total / n * type_bytes());
      auto* recv = e_.out->take_bytes(total / n * n * type_bytes());
      if (live()) MOESIM_NCCL_CHECK(ncclAllGather(send, recv, total / n, type, c.comm, s()));
    } else if (op_.kind == OpKind::reduce_scatter) {
      auto* send = e_.in->take_bytes(total / n * n * type_bytes());
      auto* recv = e_.out->take_bytes(total / n * type_bytes());
      if (live()) MOESIM_NCCL_CHECK(ncclReduceScatter(send, recv, total / n, type, ncclSum, c.comm, s()));
    } else {
      auto* send = e_.in->take_bytes(total * type_bytes());
      auto* recv = e_.out->take_bytes(total * type_bytes());
      if (live()) MOESIM_NCCL_CHECK(ncclAllReduce(send, recv, total, type, ncclSum, c.comm, s()));
    }
  }

  // Dispatch direction: tokens to their experts (dispatch forward/recompute, combine backward);
  // the other direction returns them.
  bool dispatch_direction() const {
    const std::string& name = p_.name_of(op_);
    const bool is_combine = name.find(".combine") != std::string::npos;
    return is_combine == bwd();
  }

  // All-to-all(v): grouped ncclSend/ncclRecv, rows per peer from the routing plan (or equal
  // blocks when the op is not routed); the block to itself is a device copy.
  void all_to_all() {
    const GroupComm& c = e_.comm;
    if (c.size <= 1 || op_.comm_bytes <= 0) return;
    std::vector<int64_t> send_bytes(static_cast<size_t>(c.size)), recv_bytes(static_cast<size_t>(c.size));
    const RoutingSlice* r = nullptr;
    if (op_.routing_layer >= 0 && e_.routing) {
      auto it = e_.routing->find({op_.routing_layer, op_.micro});
      if (it != e_.routing->end()) r = &it->second;
    }
    if (r) {
      // The graph sized the op at the expected rows (the padded ones under capacity padding).
      const auto row_bytes = static_cast<int64_t>(op_.comm_bytes / static_cast<double>(expert_buffer_rows()));
      const bool fwd_dir = dispatch_direction();
      for (size_t q = 0; q < send_bytes.size(); ++q) {
        send_bytes[q] = (fwd_dir ? r->send_rows[q] : r->recv_rows[q]) * row_bytes;
        recv_bytes[q] = (fwd_dir ? r->recv_rows[q] : r->send_rows[q]) * row_bytes;
      }
    } else {
      const auto block = static_cast<int64_t>(op_.comm_bytes) / c.size;
      std::fill(send_bytes.begin(), send_bytes.end(), block);
      std::fill(recv_bytes.begin(), recv_bytes.end(), block);
    }
    int64_t send_total = 0, recv_total = 0;
    for (size_t q = 0; q < send_bytes.size(); ++q) {
      send_total += send_bytes[q];
      recv_total += recv_bytes[q];
    }
    auto* send = static_cast<char*>(e_.in->take_bytes(static_cast<size_t>(send_total)));
    auto* recv = static_cast<char*>(e_.out->take_bytes(static_cast<size_t>(recv_total)));
    if (!live()) return;
    int64_t so = 0, ro = 0;
    MOESIM_NCCL_CHECK(ncclGroupStart());
    for (int q = 0; q < c.size; ++q) {
      const auto sq = static_cast<size_t>(q);
      if (q == c.rank) {
        if (send_bytes[sq] > 0) {
          MOESIM_CUDA_CHECK(cudaMemcpyAsync(recv + ro, send + so, static_cast<size_t>(std::min(send_bytes[sq], recv_bytes[sq])),
                                            cudaMemcpyDeviceToDevice, s()));
        }
      } else {
        if (send_bytes[sq] > 0) MOESIM_NCCL_CHECK(ncclSend(send + so, static_cast<size_t>(send_bytes[sq]), ncclUint8, q, c.comm, s()));
        if (recv_bytes[sq] > 0) MOESIM_NCCL_CHECK(ncclRecv(recv + ro, static_cast<size_t>(recv_bytes[sq]), ncclUint8, q, c.comm, s()));
      }
      so += send_bytes[sq];
      ro += recv_bytes[sq];
    }
    MOESIM_NCCL_CHECK(ncclGroupEnd());
  }

  // Pipeline / context-parallel point to point: a peer outside the group means nothing to do.
  void p2p() {
    const GroupComm& c = e_.comm;
    const int peer = c.peer >= 0 ? c.peer : c.rank + op_.peer_offset;
    if (c.size <= 1 || peer < 0 || peer >= c.size || op_.comm_bytes <= 0) return;
    const auto bytes = static_cast<size_t>(op_.comm_bytes);
    void* buf = op_.kind == OpKind::send ? e_.in->take_bytes(bytes) : e_.out->take_bytes(bytes);
    if (!live()) return;
    if (op_.kind == OpKind::send) {
      MOESIM_NCCL_CHECK(ncclSend(buf, bytes, ncclUint8, peer, c.comm, s()));
    } else {
      MOESIM_NCCL_CHECK(ncclRecv(buf, bytes, ncclUint8, peer, c.comm, s()));
    }
  }

  OpEnv& e_;
  const Program& p_;
  const Op& op_;
};

}  // namespace

std::vector<int32_t> causal_dsa_keys(int64_t tokens, int64_t seq, int64_t k, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> keys(static_cast<size_t>(tokens * k));
  for (int64_t r = 0; r < tokens; ++r) {
    const int64_t pos = r % seq;  // position in its sequence
    for (int64_t j = 0; j < k; ++j) {
      int32_t key = -1;
      if (pos + 1 <= k) {
        key = j <= pos ? static_cast<int32_t>(j) : -1;
      } else {
        key = static_cast<int32_t>(rng() % static_cast<uint64_t>(pos + 1));
      }
      keys[static_cast<size_t>(r * k + j)] = key;
    }
  }
  return keys;
}

void launch_op(OpEnv& env, const Program& p, uint32_t i) {
  env.in->reset();
  env.out->reset();
  Launcher(env, p, p.ops[i]).run();
}

}  // namespace moesim::cuda
