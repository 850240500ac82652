// SPDX-License-Identifier: MIT
#include "graph/layer_ops.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "model/accounting.hpp"

namespace moesim {

bool LayerContext::lora_on(LoraTarget t) const {
  return std::find(lora_targets.begin(), lora_targets.end(), t) != lora_targets.end();
}

namespace {

TensorDesc desc(int64_t a, int64_t b, Dtype dt) { return TensorDesc{{a, b, 0, 0}, dt}; }

double bytes_of(int64_t elements, Dtype dt) { return static_cast<double>(elements) * dtype_bytes(dt); }

// Adds ops to a tape with the conventions shared by all layer kinds.
class TapeBuilder {
 public:
  TapeBuilder(const LayerContext& c, LayerTape& tape) : c_(c), t_(tape) {}

  int tensor(int64_t rows, int64_t cols, std::string name, Dtype dt, bool requires_grad = true) {
    return t_.tensor(desc(rows, cols, dt), std::move(name), requires_grad);
  }
  int act_tensor(int64_t rows, int64_t cols, std::string name) { return tensor(rows, cols, std::move(name), c_.act); }

  // y = x W: x (rows x in) -> y (rows x out). The weight is trainable when the base is trained;
  // a LoRA adapter (rank r: x A B) is added when `lora` is targeted.
  int gemm(const std::string& name, int x, int64_t rows, int64_t in, int64_t out, std::optional<LoraTarget> lora = {},
           std::optional<SwapTarget> swap = {}, bool trainable_override = false, bool frozen_override = false) {
    const bool trainable = !frozen_override && (c_.train_base || trainable_override);
    const bool adapter = lora && c_.lora_on(*lora) && !trainable;
    const int y = act_tensor(rows, out, adapter ? name + ".base_out" : name + ".out");
    TapeOp op;
    op.op.kind = OpKind::gemm;
    op.op.dtype = c_.compute;
    op.op.trainable_weight = trainable;
    op.op.m = rows;
    op.op.n = out;
    op.op.k = in;
    const double f = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
    op.op.flops = f;
    op.op.bytes_read = bytes_of(rows * in, c_.act) + bytes_of(in * out, c_.compute);
    op.op.bytes_written = bytes_of(rows * out, c_.act);
    op.name = name;
    op.inputs = {x};
    op.outputs = {y};
    if (trainable) op.bwd_needs = {x};  // the weight gradient reads x; the input gradient only W
    op.bwd_kind = OpKind::gemm;
    op.bwd_flops = f;
    op.wgrad_flops = f;
    op.swap = swap;
    t_.add(op);
    if (!adapter) return y;
    // LoRA: a = x A (rows x r), y = base + (alpha / r) a B; both adapter matrices trainable.
    const int64_t r = c_.lora_rank;
    const int a = act_tensor(rows, r, name + ".lora_a");
    TapeOp la = lora_op(name + ".lora_a", {x}, {a}, rows, in, r);
    la.bwd_needs = {x};
    t_.add(la);
    const int yo = act_tensor(rows, out, name + ".out");
    TapeOp lb = lora_op(name + ".lora_b", {a, y}, {yo}, rows, r, out);
    lb.bwd_needs = {a};
    t_.add(lb);
    return yo;
  }

  // Grouped GEMM over this rank's experts: x (rows x in) -> (rows x out).
  int grouped_gemm(const std::string& name, int x, int64_t rows, int64_t in, int64_t out, int32_t routing_layer,
                   std::optional<SwapTarget> swap) {
    const bool trainable = c_.train_base;
    const bool adapter = c_.lora_on(LoraTarget::routed_experts) && !trainable;
    const int y = act_tensor(rows, out, adapter ? name + ".base_out" : name + ".out");
    TapeOp op;
    op.op.kind = OpKind::grouped_gemm;
    op.op.dtype = c_.compute;
    op.op.trainable_weight = trainable;
    op.op.routing_layer = routing_layer;
    op.op.num_groups = static_cast<int32_t>(c_.experts_per_rank);
    op.op.m = rows;
    op.op.n = out;
    op.op.k = in;
    const double f = 2.0 * static_cast<double>(rows) * static_cast<double>(in) * static_cast<double>(out);
    op.op.flops = f;
    op.op.bytes_read = bytes_of(rows * in, c_.act) + bytes_of(c_.experts_per_rank * in * out, c_.compute);
    op.op.bytes_written = bytes_of(rows * out, c_.act);
    op.name = name;
    op.inputs = {x};
    op.outputs = {y};
    if (trainable) op.bwd_needs = {x};
    op.bwd_kind = OpKind::grouped_gemm;
    op.bwd_flops = f;
    op.wgrad_flops = f;
    op.swap = swap;
    t_.add(op);
    if (!adapter) return y;
    const int64_t r = c_.lora_rank;
    const int a = act_tensor(rows, r, name + ".lora_a");
    TapeOp la = lora_op(name + ".lora_a", {x}, {a}, rows, in, r);
    la.op.num_groups = static_cast<int32_t>(c_.experts_per_rank);
    la.op.routing_layer = routing_layer;
    la.bwd_needs = {x};
    t_.add(la);
    const int yo = act_tensor(rows, out, name + ".out");
    TapeOp lb = lora_op(name + ".lora_b", {a, y}, {yo}, rows, r, out);
    lb.op.num_groups = static_cast<int32_t>(c_.experts_per_rank);
    lb.op.routing_layer = routing_layer;
    lb.bwd_needs = {a};
    t_.add(lb);
    return yo;
  }

  // An elementwise-like op (norm, activation, add): cheap, recomputed under selective recompute.
  int pointwise(OpKind kind, const std::string& name, std::vector<int> inputs, int64_t rows, int64_t cols,
                double flops_per_element, std::vector<int> needs, Dtype out_dtype) {
    const int y = tensor(rows, cols, name + ".out", out_dtype);
    TapeOp op;
    op.op.kind = kind;
    op.op.dtype = c_.act;
    op.op.flops = flops_per_element * static_cast<double>(rows * cols);
    for (int in : inputs) op.op.bytes_read += t_.tensors()[static_cast<size_t>(in)].desc.bytes();
    op.op.bytes_written = t_.tensors()[static_cast<size_t>(y)].desc.bytes();
    op.name = name;
    op.inputs = std::move(inputs);
    op.outputs = {y};
    op.bwd_needs = std::move(needs);
    op.bwd_kind = kind;
    op.bwd_flops = 2 * op.op.flops;
    op.cheap = true;
    t_.add(op);
    return y;
  }

  int norm(const std::string& name, int x, int64_t rows, int64_t cols) {
    return pointwise(OpKind::norm, name, {x}, rows, cols, 4.0, {x}, c_.act);
  }

  // A communication op of the forward: its backward is the adjoint collective.
  int communicate(OpKind kind, GroupKind group, const std::string& name, int x, TensorDesc out_desc,
                  double comm_bytes, int32_t routing_layer = -1) {
    const int y = t_.tensor(out_desc, name + ".out");
    TapeOp op;
    op.op.kind = kind;
    op.op.group = group;
    op.op.dtype = c_.act;
    op.op.comm_bytes = comm_bytes;
    op.op.routing_layer = routing_layer;
    op.name = name;
    op.inputs = {x};
    op.outputs = {y};
    op.bwd_kind = kind;
    t_.add(op);
    return y;
  }

  // Enter a TP region: gather the sequence shards (SP), or mark the input gradient for an
  // all-reduce (no SP). `x` is the output of the norm that precedes the region.
  int enter_tp(const std::string& name, int x) {
    if (c_.tp == 1) return x;
    const int64_t d = c_.model->hidden_size;
    if (c_.sequence_parallel) {
      return communicate(OpKind::all_gather, GroupKind::tp, name + ".tp_all_gather", x,
                         desc(c_.tokens, d, c_.act), bytes_of(c_.tokens * d, c_.act));
    }
    TapeOp& producer = last_producer_of(x);
    producer.all_reduce_output_grad = true;
    producer.all_reduce_bytes = bytes_of(c_.tokens * d, c_.act);
    return x;
  }

  // Leave a TP region: reduce-scatter to sequence shards (SP) or all-reduce (no SP).
  int exit_tp(const std::string& name, int y) {
    if (c_.tp == 1) return y;
    const int64_t d = c_.model->hidden_size;
    if (c_.sequence_parallel) {
      return communicate(OpKind::reduce_scatter, GroupKind::tp, name + ".tp_reduce_scatter", y,
                         desc(c_.sp_tokens(), d, c_.act), bytes_of(c_.tokens * d, c_.act));
    }
    return communicate(OpKind::all_reduce, GroupKind::tp, name + ".tp_all_reduce", y, desc(c_.tokens, d, c_.act),
                       bytes_of(c_.tokens * d, c_.act));
  }

  LayerTape& tape() { return t_; }
  const LayerContext& ctx() const { return c_; }

  TapeOp& add(TapeOp op) { return t_.add(std::move(op)); }

 private:
  TapeOp lora_op(const std::string& name, std::vector<int> in, std::vector<int> out, int64_t rows, int64_t k,
                 int64_t n) {
    TapeOp op;
    op.op.kind = OpKind::lora_gemm;
    op.op.dtype = c_.compute;
    op.op.trainable_weight = true;
    op.op.m = rows;
    op.op.n = n;
    op.op.k = k;
    const double f = 2.0 * static_cast<double>(rows) * static_cast<double>(k) * static_cast<double>(n);
    op.op.flops = f;
    op.op.bytes_read = bytes_of(rows * k, c_.act) + bytes_of(k * n, c_.compute);
    op.op.bytes_written = bytes_of(rows * n, c_.act);
    op.name = name;
    op.inputs = std::move(in);
    op.outputs = std::move(out);
    op.bwd_kind = OpKind::lora_gemm;
    op.bwd_flops = f;
    op.wgrad_flops = f;
    return op;
  }

  TapeOp& last_producer_of(int tensor) {
    auto& ops = t_.mutable_ops();
    for (size_t i = ops.size(); i-- > 0;) {
      if (std::find(ops[i].outputs.begin(), ops[i].outputs.end(), tensor) != ops[i].outputs.end()) return ops[i];
    }
    return ops.back();
  }

  const LayerContext& c_;
  LayerTape& t_;
};

// Mean keys per query of a causal sequence of n tokens when at most `limit` are read.
double mean_keys(int64_t n, int64_t limit) {
  const double k = static_cast<double>(limit);
  const double nn = static_cast<double>(n);
  if (n <= limit) return (nn + 1) / 2;
  return (k * (k + 1) / 2 + (nn - k) * k) / nn;
}

// A dense causal attention core (flash style): 2 * heads * (d_qk + d_v) FLOPs per (query, key).
int flash_attention(TapeBuilder& b, const std::string& name, std::vector<int> qkv, int64_t heads, int64_t d_qk,
                    int64_t d_v) {
  const auto& c = b.ctx();
  const int64_t t = c.tokens;
  const int o = b.act_tensor(t, heads * d_v, name + ".attn");
  TapeOp op;
  op.op.kind = OpKind::flash_attention;
  op.op.dtype = c.compute;
  op.op.flops = 2.0 * static_cast<double>(t * heads * (d_qk + d_v)) * mean_keys(c.seq_len, c.seq_len);
  for (int in : qkv) op.op.bytes_read += b.tape().tensors()[static_cast<size_t>(in)].desc.bytes();
  op.op.bytes_written = bytes_of(t * heads * d_v, c.act) + bytes_of(t * heads, Dtype::fp32);
  op.name = name + ".flash_attention";
  op.inputs = qkv;
  op.outputs = {o};
  op.bwd_needs = qkv;
  op.bwd_needs.push_back(o);
  op.bwd_kind = OpKind::flash_attention;
  op.bwd_flops = 2 * op.op.flops;
  op.cheap = true;  // the attention core: what selective recompute recomputes
  b.add(op);
  return o;
}

// Context parallelism: all-gather keys/values (or latents) of every CP rank before attention.
int gather_context(TapeBuilder& b, const std::string& name, int x, int64_t cols) {
  const auto& c = b.ctx();
  if (c.cp == 1) return x;
  const int64_t rows = c.tokens * c.cp;
  return b.communicate(OpKind::all_gather, GroupKind::cp, name + ".cp_all_gather", x, desc(rows, cols, c.act),
                       bytes_of(rows * cols, c.act));
}

int gqa_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  const auto& g = *c.model->gqa;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t h = g.num_heads / c.tp;
  const int64_t kv = std::max<int64_t>(g.num_kv_heads / c.tp, 1);
  int q = b.gemm("attn.q_proj", x, t, d, h * g.head_dim, LoraTarget::q_proj, SwapTarget::attention_in_proj);
  int k = b.gemm("attn.k_proj", x, t, d, kv * g.head_dim, LoraTarget::k_proj, SwapTarget::attention_in_proj);
  int v = b.gemm("attn.v_proj", x, t, d, kv * g.head_dim, LoraTarget::v_proj, SwapTarget::attention_in_proj);
  if (g.qk_norm) {
    q = b.norm("attn.q_norm", q, t, h * g.head_dim);
    k = b.norm("attn.k_norm", k, t, kv * g.head_dim);
  }
  k = gather_context(b, "attn.k", k, kv * g.head_dim);
  v = gather_context(b, "attn.v", v, kv * g.head_dim);
  const int o = flash_attention(b, "attn", {q, k, v}, h, g.head_dim, g.head_dim);
  return b.gemm("attn.o_proj", o, t, h * g.head_dim, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

// The query path shared by MLA and MLA+DSA: returns (q, q latent or x).
std::pair<int, int> mla_query(TapeBuilder& b, int x, int64_t h) {
  const auto& c = b.ctx();
  const auto& a = *c.model->mla;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  if (a.q_lora_rank == 0) {
    return {b.gemm("attn.q_proj", x, t, d, h * qk, LoraTarget::q_proj, SwapTarget::attention_in_proj), x};
  }
  // The down-projections are not split by TP: every TP rank computes them.
  int cq = b.gemm("attn.q_a_proj", x, t, d, a.q_lora_rank, LoraTarget::q_a_proj, SwapTarget::attention_in_proj);
  cq = b.norm("attn.q_a_norm", cq, t, a.q_lora_rank);
  return {b.gemm("attn.q_b_proj", cq, t, a.q_lora_rank, h * qk, LoraTarget::q_b_proj, SwapTarget::attention_in_proj),
          cq};
}

int output_gate(TapeBuilder& b, int x, int o, int64_t width, OutputGate gate, int64_t gate_rank, bool gated_norm) {
  const auto& c = b.ctx();
  const int64_t t = c.tokens, d = c.model->hidden_size;
  if (gate == OutputGate::none) return o;
  int g = 0;
  if (gate == OutputGate::full) {
    g = b.gemm("attn.gate_proj", x, t, d, width, LoraTarget::output_gate);
  } else {
    const int ga = b.gemm("attn.gate_a_proj", x, t, d, gate_rank, LoraTarget::output_gate);
    g = b.gemm("attn.gate_b_proj", ga, t, gate_rank, width, LoraTarget::output_gate);
  }
  if (gated_norm) return b.pointwise(OpKind::norm, "attn.gated_norm", {o, g}, t, width, 6.0, {o, g}, c.act);
  return b.pointwise(OpKind::elementwise, "attn.gate", {o, g}, t, width, 4.0, {o, g}, c.act);
}

int mla_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  const auto& a = *c.model->mla;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t h = a.num_heads / c.tp;
  const int q = mla_query(b, x, h).first;
  int ckv = b.gemm("attn.kv_a_proj", x, t, d, a.kv_lora_rank + a.qk_rope_head_dim, LoraTarget::kv_a_proj,
                   SwapTarget::attention_in_proj);
  ckv = b.norm("attn.kv_a_norm", ckv, t, a.kv_lora_rank + a.qk_rope_head_dim);
  const int kv = b.gemm("attn.kv_b_proj", ckv, t, a.kv_lora_rank, h * (a.qk_nope_head_dim + a.v_head_dim),
                        LoraTarget::kv_b_proj, SwapTarget::attention_in_proj);
  const int kv_all = gather_context(b, "attn.kv", kv, h * (a.qk_nope_head_dim + a.v_head_dim));
  int o = flash_attention(b, "attn", {q, kv_all}, h, a.qk_nope_head_dim + a.qk_rope_head_dim, a.v_head_dim);
  o = output_gate(b, x, o, h * a.v_head_dim, a.output_gate, 0, false);
  return b.gemm("attn.o_proj", o, t, h * a.v_head_dim, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

// MLA with DeepSeek Sparse Attention: the lightning indexer picks top_k keys per query; the main
// attention runs in MLA's absorbed (MQA) form over the selected latents (kv_lora + rope per key,
// shared by all heads), REFERENCE.md section 3.
int mla_dsa_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  const auto& a = *c.model->mla;
  const auto& ix = *c.model->dsa_indexer;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t h = a.num_heads / c.tp;
  const int64_t latent = a.kv_lora_rank + a.qk_rope_head_dim;
  auto [q, cq] = mla_query(b, x, h);
  int ckv = b.gemm("attn.kv_a_proj", x, t, d, latent, LoraTarget::kv_a_proj, SwapTarget::attention_in_proj);
  ckv = b.norm("attn.kv_a_norm", ckv, t, latent);
  // Absorb W_UK into the query, head by head: q_nope (128) -> latent (512); kv_b's key half. A
  // batched GEMM of t x h rows.
  const int q_lat = b.gemm("attn.q_absorb", q, t * h, a.qk_nope_head_dim, a.kv_lora_rank, LoraTarget::kv_b_proj);
  // Indexer (its input is detached: no gradient flows from it into the model).
  const int64_t q_in = a.q_lora_rank > 0 ? a.q_lora_rank : d;
  const int64_t ih = ix.num_heads / c.tp;
  const int q_idx = b.gemm("indexer.q_proj", cq, t, q_in, ih * ix.head_dim);
  const int k_idx = b.gemm("indexer.k_proj", x, t, d, ix.head_dim);
  const int w_idx = b.gemm("indexer.weights_proj", x, t, d, ih);
  const int k_idx_all = gather_context(b, "indexer.k", k_idx, ix.head_dim);
  const int ckv_all = gather_context(b, "attn.latent", ckv, latent);
  const double pairs = static_cast<double>(t) * mean_keys(c.seq_len, c.seq_len);
  const double indexer_flops = 2.0 * static_cast<double>(ih * ix.head_dim) * pairs;
  const int64_t kept_keys = std::min(ix.top_k, c.seq_len);
  const int idx = b.tensor(t, kept_keys, "indexer.topk_indices", Dtype::int32, false);
  const bool trainable_indexer = c.train_base;
  if (c.fused.dsa) {
    TapeOp li;  // LI: scores, ReLU-weighted head sum and top-k in one kernel; scores never leave chip
    li.op.kind = OpKind::dsa_indexer;
    li.op.dtype = ix.dtype;
    li.op.flops = indexer_flops;
    li.op.bytes_read = bytes_of(t * ih * ix.head_dim + t * c.cp * ix.head_dim, ix.dtype);
    li.op.bytes_written = bytes_of(t * kept_keys, Dtype::int32);
    li.name = "indexer.lightning_indexer";
    li.inputs = {q_idx, k_idx_all, w_idx};
    li.outputs = {idx};
    li.has_bwd = trainable_indexer;
    li.bwd_needs = {q_idx, k_idx_all, w_idx};
    li.bwd_kind = OpKind::dsa_indexer;
    li.bwd_flops = 2 * indexer_flops;
    b.add(li);
  } else {
    // Unfused: the head-summed scores are written (fp32, the causal half of T x S), then top-k.
    const int scores = b.tensor(t, std::max<int64_t>(c.seq_len / 2, 1), "indexer.scores", Dtype::fp32, false);
    TapeOp sc;
    sc.op.kind = OpKind::indexer_score;
    sc.op.dtype = ix.dtype;
    sc.op.flops = indexer_flops;
    sc.op.bytes_read = bytes_of(t * ih * ix.head_dim + t * c.cp * ix.head_dim, ix.dtype);
    sc.op.bytes_written = pairs * 4.0;
    sc.name = "indexer.score";
    sc.inputs = {q_idx, k_idx_all, w_idx};
    sc.outputs = {scores};
    sc.has_bwd = trainable_indexer;
    sc.bwd_needs = {q_idx, k_idx_all, w_idx};
    sc.bwd_kind = OpKind::indexer_score;
    sc.bwd_flops = 2 * indexer_flops;
    b.add(sc);
    TapeOp tk;
    tk.op.kind = OpKind::topk;
    tk.op.dtype = Dtype::fp32;
    tk.op.bytes_read = pairs * 4.0;
    tk.op.bytes_written = bytes_of(t * kept_keys, Dtype::int32);
    tk.name = "indexer.topk";
    tk.inputs = {scores};
    tk.outputs = {idx};
    tk.has_bwd = false;
    b.add(tk);
  }
  const double sparse_flops =
      2.0 * static_cast<double>(t * h * (latent + a.kv_lora_rank)) * mean_keys(c.seq_len, ix.top_k);
  int o_lat = b.act_tensor(t, h * a.kv_lora_rank, "attn.sparse_out");
  if (c.fused.dsa) {
    TapeOp sfa;  // SFA forward / SFAG backward: gathers the selected latents on chip
    sfa.op.kind = OpKind::sparse_attention;
    sfa.op.dtype = c.compute;
    sfa.op.flops = sparse_flops;
    sfa.op.bytes_read = bytes_of(t * h * latent, c.act) + bytes_of(t * kept_keys, Dtype::int32) +
                        bytes_of(std::min(t * kept_keys, t * c.cp) * latent, c.act);
    sfa.op.bytes_written = bytes_of(t * h * a.kv_lora_rank, c.act);
    sfa.name = "attn.sparse_flash_attention";
    sfa.inputs = {q_lat, ckv_all, idx};
    sfa.outputs = {o_lat};
    sfa.bwd_needs = {q_lat, ckv_all, idx, o_lat};
    sfa.bwd_kind = OpKind::sparse_attention;
    sfa.bwd_flops = 2 * sparse_flops;
    sfa.cheap = true;
    b.add(sfa);
  } else {
    // Unfused: the selected latents are gathered into memory (per query, top_k x latent), then a
    // batched attention over them.
    const int gathered = b.act_tensor(t, kept_keys * latent, "attn.gathered_latents");
    TapeOp g;
    g.op.kind = OpKind::kv_gather;
    g.op.dtype = c.act;
    g.op.bytes_read = bytes_of(t * kept_keys * latent, c.act);
    g.op.bytes_written = bytes_of(t * kept_keys * latent, c.act);
    g.name = "attn.kv_gather";
    g.inputs = {ckv_all, idx};
    g.outputs = {gathered};
    g.bwd_needs = {idx};
    g.bwd_kind = OpKind::kv_gather;
    g.cheap = true;
    b.add(g);
    TapeOp sa;
    sa.op.kind = OpKind::sparse_attention;
    sa.op.dtype = c.compute;
    sa.op.flops = sparse_flops;
    sa.op.bytes_read = bytes_of(t * kept_keys * latent + t * h * latent, c.act);
    sa.op.bytes_written = bytes_of(t * h * kept_keys, Dtype::fp32) + bytes_of(t * h * a.kv_lora_rank, c.act);
    sa.name = "attn.sparse_attention";
    sa.inputs = {q_lat, gathered};
    sa.outputs = {o_lat};
    sa.bwd_needs = {q_lat, gathered, o_lat};
    sa.bwd_kind = OpKind::sparse_attention;
    sa.bwd_flops = 2 * sparse_flops;
    sa.cheap = true;
    b.add(sa);
  }
  // Absorb W_UV, head by head: latent (512) -> value (128); kv_b's value half.
  int o = b.gemm("attn.v_absorb", o_lat, t * h, a.kv_lora_rank, a.v_head_dim, LoraTarget::kv_b_proj);
  o = output_gate(b, x, o, h * a.v_head_dim, a.output_gate, 0, false);
  return b.gemm("attn.o_proj", o, t, h * a.v_head_dim, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

// Kimi Delta Attention, chunkwise (REFERENCE.md section 2): per head and token
// 6 dh^2 + 3 C dh + C^2 FLOPs forward, split over the reference kernels' stages when unfused.
int kda_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  const auto& k = *c.model->kda;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t h = k.num_heads / c.tp;
  const int64_t p = h * k.head_dim;
  const double dh = static_cast<double>(k.head_dim);
  const double chunk = static_cast<double>(std::min(k.chunk_size, c.seq_len));
  const double th = static_cast<double>(t * h);
  int q = b.gemm("attn.q_proj", x, t, d, p, LoraTarget::q_proj, SwapTarget::attention_in_proj);
  int kk = b.gemm("attn.k_proj", x, t, d, p, LoraTarget::k_proj, SwapTarget::attention_in_proj);
  int v = b.gemm("attn.v_proj", x, t, d, p, LoraTarget::v_proj, SwapTarget::attention_in_proj);
  const int fa = b.gemm("attn.decay_a_proj", x, t, d, k.decay_gate_rank);
  const int decay = b.gemm("attn.decay_b_proj", fa, t, k.decay_gate_rank, p);
  const int beta = b.gemm("attn.beta_proj", x, t, d, h);
  if (k.short_conv_kernel > 0) {
    const int qkv = b.tensor(t, 3 * p, "attn.conv_out", c.act);
    TapeOp conv;
    conv.op.kind = OpKind::short_conv;
    conv.op.dtype = c.act;
    conv.op.flops = 2.0 * static_cast<double>(t * 3 * p * k.short_conv_kernel);
    conv.op.bytes_read = bytes_of(3 * t * p, c.act);
    conv.op.bytes_written = bytes_of(3 * t * p, c.act);
    conv.name = "attn.short_conv";
    conv.inputs = {q, kk, v};
    conv.outputs = {qkv};
    conv.bwd_needs = {q, kk, v};
    conv.bwd_kind = OpKind::short_conv;
    conv.bwd_flops = 2 * conv.op.flops;
    conv.cheap = true;
    b.add(conv);
    q = kk = v = qkv;
  }
  const std::vector<int> core_in = q == kk ? std::vector<int>{q, decay, beta} : std::vector<int>{q, kk, v, decay, beta};
  const double total = th * (6 * dh * dh + 3 * chunk * dh + chunk * chunk);
  int o = b.act_tensor(t, p, "attn.kda_out");
  if (c.fused.kda) {
    TapeOp core;
    core.op.kind = OpKind::kda;
    core.op.dtype = c.compute;
    core.op.flops = total;
    core.op.bytes_read = bytes_of(4 * t * p + t * h, c.act);
    core.op.bytes_written = bytes_of(t * p, c.act);
    core.name = "attn.kda";
    core.inputs = core_in;
    core.outputs = {o};
    core.bwd_needs = core_in;
    core.bwd_kind = OpKind::kda;
    core.bwd_flops = 2 * total;  // a fused backward recomputes w, u and the chunk states
    core.cheap = true;
    b.add(core);
  } else {
    // The reference kernels' stages, with their intermediates in memory: cumulative gates (fp32),
    // the WY factors w, u and the intra-chunk Aqk, the per-chunk states (fp32 dh x dh per head).
    const double chunks = std::ceil(static_cast<double>(t) / chunk);
    const int gcum = b.tensor(t, p, "attn.kda_gate_cumsum", Dtype::fp32);
    const int wu = b.act_tensor(t, 2 * p + h * static_cast<int64_t>(chunk), "attn.kda_wy");
    const int states = b.tensor(static_cast<int64_t>(chunks), h * k.head_dim * k.head_dim, "attn.kda_states", Dtype::fp32);
    struct Stage {
      OpKind kind;
      const char* name;
      std::vector<int> in;
      int out;
      double flops;
    };
    const std::vector<Stage> stages{
        {OpKind::kda_gate_cumsum, "attn.kda_gate_cumsum", {decay}, gcum, th * k.head_dim},
        {OpKind::kda_intra_chunk, "attn.kda_intra_chunk", {kk, v, gcum, beta}, wu, th * (3 * chunk * dh + chunk * chunk)},
        {OpKind::kda_inter_chunk, "attn.kda_inter_chunk", {kk, wu, gcum}, states, th * 4 * dh * dh},
        {OpKind::kda_output, "attn.kda_output", {q, states, wu, gcum}, o, th * 2 * dh * dh},
    };
    for (const auto& st : stages) {
      TapeOp op;
      op.op.kind = st.kind;
      op.op.dtype = st.kind == OpKind::kda_gate_cumsum ? Dtype::fp32 : c.compute;
      op.op.flops = st.flops;
      for (int in : st.in) op.op.bytes_read += b.tape().tensors()[static_cast<size_t>(in)].desc.bytes();
      op.op.bytes_written = b.tape().tensors()[static_cast<size_t>(st.out)].desc.bytes();
      op.name = st.name;
      op.inputs = st.in;
      op.outputs = {st.out};
      op.bwd_needs = st.in;
      op.bwd_kind = st.kind;
      op.bwd_flops = 2 * st.flops;
      op.cheap = true;
      b.add(op);
    }
  }
  if (c.cp > 1) {
    // Context parallelism: the state (h x dh x dh, fp32) passes from CP rank to CP rank; each rank
    // corrects its outputs with the state it receives, then sends its final state on.
    const int64_t state_elems = h * k.head_dim * k.head_dim;
    TapeOp recv;
    const int s_in = b.tensor(1, state_elems, "attn.kda_state_in", Dtype::fp32);
    recv.op.kind = OpKind::recv;
    recv.op.group = GroupKind::cp;
    recv.op.peer_offset = -1;
    recv.op.comm_bytes = bytes_of(state_elems, Dtype::fp32);
    recv.name = "attn.kda_state_recv";
    recv.outputs = {s_in};
    recv.bwd_kind = OpKind::send;
    b.add(recv);
    const int o2 = b.act_tensor(t, p, "attn.kda_out_corrected");
    TapeOp fix;
    fix.op.kind = OpKind::kda_state_correction;
    fix.op.dtype = c.compute;
    fix.op.flops = th * 4 * dh * dh;  // q S and the decayed state update
    fix.op.bytes_read = bytes_of(2 * t * p, c.act) + bytes_of(state_elems, Dtype::fp32);
    fix.op.bytes_written = bytes_of(t * p, c.act);
    fix.name = "attn.kda_state_correction";
    fix.inputs = {o, s_in, q};
    fix.outputs = {o2};
    fix.bwd_needs = {s_in, q};
    fix.bwd_kind = OpKind::kda_state_correction;
    fix.bwd_flops = 2 * fix.op.flops;
    b.add(fix);
    TapeOp send;
    send.op.kind = OpKind::send;
    send.op.group = GroupKind::cp;
    send.op.peer_offset = 1;
    send.op.comm_bytes = bytes_of(state_elems, Dtype::fp32);
    send.name = "attn.kda_state_send";
    send.inputs = {s_in};
    send.bwd_kind = OpKind::recv;
    b.add(send);
    o = o2;
  }
  o = output_gate(b, x, o, p, k.output_gate, k.output_gate_rank, true);
  return b.gemm("attn.o_proj", o, t, p, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

// A gated (or plain) FFN on width w of `rows` tokens, TP-split on its intermediate dimension.
int ffn(TapeBuilder& b, const std::string& name, int x, int64_t rows, int64_t w, int64_t f, LoraTarget lora,
        std::optional<SwapTarget> up_swap) {
  const auto& c = b.ctx();
  const bool gated = is_gated(c.model->activation);
  const int64_t fl = f / c.tp;
  const int up = b.gemm(name + ".up_proj", x, rows, w, (gated ? 2 : 1) * fl, lora, up_swap);
  const int a = b.pointwise(OpKind::activation, name + ".act", {up}, rows, fl, gated ? 4.0 : 8.0, {up}, c.act);
  return b.gemm(name + ".down_proj", a, rows, fl, w, lora);
}

int moe_block(TapeBuilder& b, int x, int64_t layer) {
  const auto& c = b.ctx();
  const auto& m = *c.model->moe;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t w = m.latent_size > 0 ? m.latent_size : d;
  const auto rl = static_cast<int32_t>(layer);
  // Router: scores for every expert, top-k with (renormalised) weights.
  const int weights = b.tensor(t, m.top_k, "moe.topk_weights", Dtype::fp32);
  const int indices = b.tensor(t, m.top_k, "moe.topk_indices", Dtype::int32, false);
  {
    TapeOp r;
    r.op.kind = OpKind::router;
    r.op.dtype = c.compute;
    r.op.trainable_weight = c.train_base;
    r.op.m = t;
    r.op.n = m.num_experts;
    r.op.k = d;
    r.op.flops = 2.0 * static_cast<double>(t * d * m.num_experts);
    r.op.bytes_read = bytes_of(t * d, c.act) + bytes_of(d * m.num_experts, c.compute);
    r.op.bytes_written = bytes_of(t * m.top_k, Dtype::fp32) + bytes_of(t * m.top_k, Dtype::int32);
    r.name = "moe.router";
    r.inputs = {x};
    r.outputs = {weights, indices};
    r.bwd_needs = {x, weights, indices};
    r.bwd_kind = OpKind::router;
    r.bwd_flops = r.op.flops;
    r.wgrad_flops = r.op.flops;
    b.add(r);
  }
  // Shared experts see every token.
  int shared = -1;
  if (m.num_shared_experts > 0) {
    const int64_t fs = m.shared_intermediate_size > 0 ? m.shared_intermediate_size : m.expert_intermediate_size;
    shared = ffn(b, "moe.shared_experts", x, t, d, m.num_shared_experts * fs, LoraTarget::shared_experts,
                 SwapTarget::shared_expert_up);
  }
  int xl = x;
  if (m.latent_size > 0) {
    xl = b.gemm("moe.latent_down_proj", x, t, d, m.latent_size, LoraTarget::latent_proj, SwapTarget::latent_down);
    xl = b.norm("moe.latent_norm", xl, t, m.latent_size);
  }
  const int64_t assignments = t * m.top_k;  // expected rows sent and received under any routing
  int dispatched_in = xl;
  if (!c.fused.permute_gemm) {
    const int perm = b.act_tensor(assignments, w, "moe.permuted");
    TapeOp p;
    p.op.kind = OpKind::permute;
    p.op.dtype = c.act;
    p.op.routing_layer = rl;
    p.op.bytes_read = bytes_of(assignments * w, c.act);
    p.op.bytes_written = bytes_of(assignments * w, c.act);
    p.name = "moe.permute";
    p.inputs = {xl, indices};
    p.outputs = {perm};
    p.bwd_needs = {indices};
    p.bwd_kind = OpKind::unpermute;
    p.cheap = true;
    b.add(p);
    dispatched_in = perm;
  }
  const double a2a = bytes_of(assignments * w, c.act);
  const int received = b.communicate(OpKind::all_to_all, GroupKind::ep, "moe.dispatch", dispatched_in,
                                     desc(assignments, w, c.act), a2a, rl);
  const int64_t f = m.expert_intermediate_size / c.tp;
  const bool gated = is_gated(c.model->activation);
  const int up = b.grouped_gemm(c.fused.permute_gemm ? "moe.experts.permute_up_proj" : "moe.experts.up_proj", received,
                                assignments, w, (gated ? 2 : 1) * f, rl, SwapTarget::expert_gmm_up);
  const int act = b.pointwise(OpKind::activation, "moe.experts.act", {up}, assignments, f, gated ? 4.0 : 8.0, {up},
                              c.act);
  const int down = b.grouped_gemm("moe.experts.down_proj", act, assignments, f, w, rl, SwapTarget::expert_gmm_down);
  const int back = b.communicate(OpKind::all_to_all, GroupKind::ep, "moe.combine", down, desc(assignments, w, c.act),
                                 a2a, rl);
  const int combined = b.act_tensor(t, w, "moe.unpermuted");
  {
    TapeOp u;  // weighted sum of each token's top_k expert outputs
    u.op.kind = OpKind::unpermute;
    u.op.dtype = c.act;
    u.op.routing_layer = rl;
    u.op.flops = 2.0 * static_cast<double>(assignments * w);
    u.op.bytes_read = bytes_of(assignments * w, c.act);
    u.op.bytes_written = bytes_of(t * w, c.act);
    u.name = "moe.unpermute";
    u.inputs = {back, weights, indices};
    u.outputs = {combined};
    u.bwd_needs = {back, weights, indices};
    u.bwd_kind = OpKind::permute;
    b.add(u);
  }
  int y = combined;
  if (m.latent_size > 0) {
    y = b.gemm("moe.latent_up_proj", combined, t, m.latent_size, d, LoraTarget::latent_proj);
  }
  if (shared >= 0) {
    y = b.pointwise(OpKind::elementwise, "moe.add_shared", {y, shared}, t, d, 1.0, {}, c.act);
  }
  return y;
}

int dense_ffn_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  return ffn(b, "ffn", x, c.tokens, c.model->hidden_size, c.model->dense_ffn->intermediate_size, LoraTarget::dense_ffn,
             SwapTarget::dense_ffn_up);
}

// Attention Residuals (block variant): each sub-layer's input is a softmax-weighted sum of the
// block summaries and the embedding; ~8 x d per token stays resident (REFERENCE.md section 4).
int attention_residual(TapeBuilder& b, const std::string& name, int h, int64_t layer) {
  const auto& c = b.ctx();
  const auto& model = *c.model;
  if (!model.attention_residuals) return h;
  const int64_t sources = (layer - 1) / model.attention_residuals->block_size + 2;
  const int64_t rows = c.sp_tokens(), d = model.hidden_size;
  const int y = b.act_tensor(rows, d, name + ".out");
  TapeOp op;
  op.op.kind = OpKind::attention_residual;
  op.op.dtype = c.act;
  op.op.flops = 4.0 * static_cast<double>(rows * d * sources);
  op.op.bytes_read = bytes_of(rows * d * sources, c.act);
  op.op.bytes_written = bytes_of(rows * d, c.act);
  op.name = name;
  op.inputs = {h};
  op.outputs = {y};
  op.bwd_needs = {h};
  op.bwd_kind = OpKind::attention_residual;
  op.bwd_flops = 2 * op.op.flops;
  op.cheap = true;
  b.add(op);
  return y;
}

}  // namespace

LayerTape build_layer_tape(const LayerContext& c, int64_t layer) {
  const auto& model = *c.model;
  const LayerKinds kinds = model.layer_kinds[static_cast<size_t>(layer - 1)];
  const int64_t d = model.hidden_size;
  LayerTape tape(desc(c.sp_tokens(), d, c.act));
  TapeBuilder b(c, tape);
  // Attention sub-layer.
  int h = attention_residual(b, "attn_res", 0, layer);
  int x = b.norm("attn_norm", h, c.sp_tokens(), d);
  x = b.enter_tp("attn", x);
  int y = 0;
  switch (kinds.attention) {
    case AttentionKind::mha:
    case AttentionKind::gqa: y = gqa_block(b, x); break;
    case AttentionKind::mla: y = mla_block(b, x); break;
    case AttentionKind::mla_dsa: y = mla_dsa_block(b, x); break;
    case AttentionKind::kda: y = kda_block(b, x); break;
  }
  y = b.exit_tp("attn", y);
  const int h_mid = b.pointwise(OpKind::elementwise, "attn_residual_add", {h, y}, c.sp_tokens(), d, 1.0, {}, c.act);
  // FFN sub-layer.
  int h2 = attention_residual(b, "ffn_res", h_mid, layer);
  x = b.norm("ffn_norm", h2, c.sp_tokens(), d);
  x = b.enter_tp("ffn", x);
  y = kinds.ffn == FfnKind::moe ? moe_block(b, x, layer) : dense_ffn_block(b, x);
  y = b.exit_tp("ffn", y);
  const int out = b.pointwise(OpKind::elementwise, "ffn_residual_add", {h2, y}, c.sp_tokens(), d, 1.0, {}, c.act);
  tape.set_output(out);
  return tape;
}

LayerTape build_embedding_tape(const LayerContext& c) {
  const int64_t rows = c.sp_tokens(), d = c.model->hidden_size;
  LayerTape tape(desc(rows, 1, Dtype::int32), "token_ids", false);
  TapeBuilder b(c, tape);
  const int h = b.act_tensor(rows, d, "embedding.out");
  TapeOp op;
  op.op.kind = OpKind::embedding;
  op.op.dtype = c.act;
  op.op.trainable_weight = c.train_base;
  op.op.bytes_read = bytes_of(rows, Dtype::int32) + bytes_of(rows * d, c.act);
  op.op.bytes_written = bytes_of(rows * d, c.act);
  op.name = "embedding";
  op.inputs = {0};
  op.outputs = {h};
  op.has_bwd = c.train_base;  // frozen under LoRA: no gradient to scatter
  op.bwd_needs = {0};
  op.bwd_kind = OpKind::embedding;
  b.add(op);
  if (c.model->position == PositionKind::learned) {
    const int hp = b.pointwise(OpKind::elementwise, "position_embedding", {h}, rows, d, 1.0, {}, c.act);
    tape.set_output(hp);
  } else {
    tape.set_output(h);
  }
  return tape;
}

LayerTape build_final_norm_tape(const LayerContext& c) {
  const int64_t d = c.model->hidden_size;
  LayerTape tape(desc(c.sp_tokens(), d, c.act));
  TapeBuilder b(c, tape);
  int x = b.norm("final_norm", 0, c.sp_tokens(), d);
  x = b.enter_tp("head", x);
  tape.set_output(x);
  return tape;
}

}  // namespace moesim
