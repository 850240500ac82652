// SPDX-License-Identifier: MIT
#include "graph/attention_ops.hpp"

#include <algorithm>
#include <cmath>
#include <string>
#include <tuple>

#include "model/accounting.hpp"

namespace moesim {
namespace {

// A batched matmul of the materialised attention core: heads x (t x k) by (k x n), no weights.
// Its backward computes both input gradients: twice the forward.
int attention_matmul(TapeBuilder& b, const std::string& name, std::vector<int> inputs, int64_t rows, int64_t k,
                     int64_t n) {
  const auto& c = b.ctx();
  const int y = b.act_tensor(rows, n, name + ".out");
  TapeOp op;
  op.op.kind = OpKind::gemm;
  op.op.dtype = c.attention;
  op.op.m = rows;
  op.op.n = n;
  op.op.k = k;
  op.op.flops = 2.0 * static_cast<double>(rows) * static_cast<double>(k) * static_cast<double>(n);
  for (int in : inputs) op.op.bytes_read += b.tape().tensors()[static_cast<size_t>(in)].desc.bytes();
  op.op.bytes_written = bytes_of(elements(rows, n), c.act);
  op.name = name;
  op.inputs = inputs;
  op.outputs = {y};
  op.bwd_needs = std::move(inputs);
  op.bwd_kind = OpKind::gemm;
  op.bwd_flops = 2 * op.op.flops;
  op.cheap = true;  // the attention core: what selective recompute recomputes
  b.add(op);
  return y;
}

// The attention core as Megatron computed it before FlashAttention (its CoreAttention): scores
// Q K^T over the whole s x s square (the causal mask applied after), a fused scaled-masked softmax,
// attention dropout, then P V. The probabilities (and the dropout mask) stay alive for backward -
// heads x t x s elements per layer and micro-batch - unless selective recompute drops them, which
// is what it was made for (Korthikanti et al. 2022, arXiv 2205.05198, section 5).
int materialized_attention(TapeBuilder& b, const std::string& name, const std::vector<int>& qkv, int64_t heads,
                           int64_t d_qk, int64_t d_v) {
  const auto& c = b.ctx();
  const int64_t rows = heads * c.tokens, keys = c.seq_len;
  const int scores = attention_matmul(b, name + ".scores", {qkv[0], qkv[1]}, rows, d_qk, keys);
  int probs = b.tensor(rows, keys, name + ".probs", c.act);
  {
    TapeOp softmax;  // reads the scores, writes the probabilities; its backward reads them back
    softmax.op.kind = OpKind::elementwise;
    softmax.op.dtype = c.act;
    softmax.op.flops = 5.0 * elements(rows, keys);
    softmax.op.bytes_read = bytes_of(elements(rows, keys), c.act);
    softmax.op.bytes_written = bytes_of(elements(rows, keys), c.act);
    softmax.name = name + ".softmax";
    softmax.inputs = {scores};
    softmax.outputs = {probs};
    softmax.bwd_needs = {probs};
    softmax.bwd_kind = OpKind::elementwise;
    softmax.bwd_flops = 2 * softmax.op.flops;
    softmax.cheap = true;
    b.add(softmax);
  }
  if (c.attention_dropout > 0) {
    const int kept = b.tensor(rows, keys, name + ".dropout", c.act);
    const int mask = b.tensor(rows, keys, name + ".dropout_mask", Dtype::int8, false);
    TapeOp dropout;
    dropout.op.kind = OpKind::elementwise;
    dropout.op.dtype = c.act;
    dropout.op.flops = 2.0 * elements(rows, keys);
    dropout.op.bytes_read = bytes_of(elements(rows, keys), c.act);
    dropout.op.bytes_written = bytes_of(elements(rows, keys), c.act) + bytes_of(elements(rows, keys), Dtype::int8);
    dropout.name = name + ".dropout";
    dropout.inputs = {probs};
    dropout.outputs = {kept, mask};
    dropout.bwd_needs = {mask};
    dropout.bwd_kind = OpKind::elementwise;
    dropout.bwd_flops = dropout.op.flops;
    dropout.cheap = true;
    b.add(dropout);
    probs = kept;
  }
  return attention_matmul(b, name + ".context", {probs, qkv[2]}, rows, keys, d_v);
}

// A dense causal attention core (flash style): 2 * heads * (d_qk + d_v) FLOPs per (query, key).
// Without fused flash kernels, the materialised core above.
int flash_attention(TapeBuilder& b, const std::string& name, std::vector<int> qkv, int64_t heads, int64_t d_qk,
                    int64_t d_v) {
  const auto& c = b.ctx();
  if (!c.fused.flash_attention) return materialized_attention(b, name, qkv, heads, d_qk, d_v);
  const int64_t t = c.tokens;
  const int o = b.act_tensor(t, heads * d_v, name + ".attn");
  TapeOp op;
  op.op.kind = OpKind::flash_attention;
  op.op.dtype = c.attention;
  op.op.m = t;
  op.op.flops = 2.0 * elements(t, heads, d_qk + d_v) * mean_causal_keys(c.seq_len, c.seq_len);
  for (int in : qkv) op.op.bytes_read += b.tape().tensors()[static_cast<size_t>(in)].desc.bytes();
  op.op.bytes_written = bytes_of(elements(t, heads, d_v), c.act) + bytes_of(elements(t, heads), Dtype::fp32);
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

// Context parallelism: all-gather keys/values (or latents) of every CP rank before attention, as
// ring attention moves them (Transformer Engine's and PyTorch's context parallelism pass each
// rank's chunk around the group; an all-gather has the same bytes). Ring attention keeps only its
// own rank's chunk for the backward and exchanges the chunks again there (rerun_for_backward);
// the gradients go back as a reduce-scatter, in parallel.cp_grad_format.
int gather_context(TapeBuilder& b, const std::string& name, int x, int64_t cols) {
  const auto& c = b.ctx();
  if (c.cp == 1) return x;
  const int64_t rows = c.tokens * c.cp;
  const int y = b.communicate(OpKind::all_gather, GroupKind::cp, name + ".cp_all_gather", x,
                              matrix_desc(rows, cols, c.act), bytes_of(elements(rows, cols), c.act));
  TapeOp& gather = b.tape().mutable_ops().back();
  gather.bwd_comm_bytes = bytes_of(elements(rows, cols), c.cp_grad);
  gather.rerun_for_backward = true;
  return y;
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

// The attention output `o` (`width` per token) gated by a projection of x: elementwise, or with
// `gated_norm_width` > 0 a gated norm normalising rows of that width (per head).
int output_gate(TapeBuilder& b, int x, int o, int64_t width, OutputGate gate, int64_t gate_rank, int64_t gated_norm_width) {
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
  if (gated_norm_width > 0) {
    return b.pointwise(OpKind::norm, "attn.gated_norm", {o, g}, t, width, 6.0, {o, g}, c.act, gated_norm_width);
  }
  return b.pointwise(OpKind::elementwise, "attn.gate", {o, g}, t, width, 4.0, {o, g}, c.act);
}

}  // namespace

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
    q = b.norm("attn.q_norm", q, t, h * g.head_dim, g.head_dim);  // per head
    k = b.norm("attn.k_norm", k, t, kv * g.head_dim, g.head_dim);
  }
  std::tie(q, k) = b.rope(q, k, t, h * g.head_dim, kv * g.head_dim);
  // Under parallel.cp_kv_heads query the exchange carries the keys and values repeated to the
  // query heads (the attention kernel reads them through its GQA groups either way).
  const int64_t exchanged = c.cp_query_heads ? h : kv;
  k = gather_context(b, "attn.k", k, exchanged * g.head_dim);
  v = gather_context(b, "attn.v", v, exchanged * g.head_dim);
  const int o = flash_attention(b, "attn", {q, k, v}, h, g.head_dim, g.head_dim);
  return b.gemm("attn.o_proj", o, t, h * g.head_dim, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
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
  o = output_gate(b, x, o, h * a.v_head_dim, a.output_gate, 0, 0);
  return b.gemm("attn.o_proj", o, t, h * a.v_head_dim, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

// MLA with DeepSeek Sparse Attention: the lightning indexer picks top_k keys per query; the main
// attention runs in MLA's absorbed (MQA) form over the selected latents (kv_lora + rope per key,
// shared by all heads), docs/modelling.md#dsa.
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
  const double pairs = static_cast<double>(t) * mean_causal_keys(c.seq_len, c.seq_len);
  const double indexer_flops = 2.0 * elements(ih, ix.head_dim) * pairs;
  const int64_t kept_keys = std::min(ix.top_k, c.seq_len);
  const int idx = b.tensor(t, kept_keys, "indexer.topk_indices", Dtype::int32, false);
  const bool trainable_indexer = c.train_base;
  if (c.fused.dsa) {
    TapeOp li;  // LI: scores, ReLU-weighted head sum and top-k in one kernel; scores never leave chip
    li.op.kind = OpKind::dsa_indexer;
    li.op.dtype = ix.dtype;
    li.op.m = t;
    li.op.flops = indexer_flops;
    li.op.bytes_read = bytes_of(elements(t, ih, ix.head_dim) + elements(t, c.cp, ix.head_dim), ix.dtype);
    li.op.bytes_written = bytes_of(elements(t, kept_keys), Dtype::int32);
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
    sc.op.m = t;
    sc.op.n = c.seq_len;
    sc.op.k = ih * ix.head_dim;
    sc.op.flops = indexer_flops;
    sc.op.bytes_read = bytes_of(elements(t, ih, ix.head_dim) + elements(t, c.cp, ix.head_dim), ix.dtype);
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
    tk.op.bytes_written = bytes_of(elements(t, kept_keys), Dtype::int32);
    tk.name = "indexer.topk";
    tk.inputs = {scores};
    tk.outputs = {idx};
    tk.has_bwd = false;
    b.add(tk);
  }
  const double sparse_flops =
      2.0 * elements(t, h, latent + a.kv_lora_rank) * mean_causal_keys(c.seq_len, ix.top_k);
  int o_lat = b.act_tensor(t, h * a.kv_lora_rank, "attn.sparse_out");
  if (c.fused.dsa) {
    TapeOp sfa;  // SFA forward / SFAG backward: gathers the selected latents on chip
    sfa.op.kind = OpKind::sparse_attention;
    sfa.op.dtype = c.attention;
    sfa.op.m = t;
    sfa.op.flops = sparse_flops;
    sfa.op.bytes_read = bytes_of(elements(t, h, latent), c.act) + bytes_of(elements(t, kept_keys), Dtype::int32) +
                        bytes_of(std::min(elements(t, kept_keys), elements(t, c.cp)) * static_cast<double>(latent), c.act);
    sfa.op.bytes_written = bytes_of(elements(t, h, a.kv_lora_rank), c.act);
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
    g.op.m = t;  // query rows: the size a calibrated gather table is read at
    g.op.bytes_read = bytes_of(elements(t, kept_keys, latent), c.act);
    g.op.bytes_written = bytes_of(elements(t, kept_keys, latent), c.act);
    g.name = "attn.kv_gather";
    g.inputs = {ckv_all, idx};
    g.outputs = {gathered};
    g.bwd_needs = {idx};
    g.bwd_kind = OpKind::kv_gather;
    g.cheap = true;
    b.add(g);
    TapeOp sa;
    sa.op.kind = OpKind::sparse_attention;
    sa.op.dtype = c.attention;
    sa.op.m = t;
    sa.op.flops = sparse_flops;
    sa.op.bytes_read = bytes_of(elements(t, kept_keys, latent) + elements(t, h, latent), c.act);
    sa.op.bytes_written = bytes_of(elements(t, h, kept_keys), Dtype::fp32) + bytes_of(elements(t, h, a.kv_lora_rank), c.act);
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
  o = output_gate(b, x, o, h * a.v_head_dim, a.output_gate, 0, 0);
  return b.gemm("attn.o_proj", o, t, h * a.v_head_dim, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

// Kimi Delta Attention, chunkwise (docs/modelling.md#kda): per head and token
// 6 dh^2 + 3 C dh + C^2 FLOPs forward, split over the reference kernels' stages when unfused.
int kda_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  const auto& k = *c.model->kda;
  const int64_t t = c.tokens, d = c.model->hidden_size;
  const int64_t h = k.num_heads / c.tp;
  const int64_t p = h * k.head_dim;
  const double dh = static_cast<double>(k.head_dim);
  const double chunk = static_cast<double>(std::min(k.chunk_size, c.seq_len));
  const double th = elements(t, h);
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
    conv.op.flops = 2.0 * elements(t, 3, p, k.short_conv_kernel);
    conv.op.bytes_read = bytes_of(elements(3, t, p), c.act);
    conv.op.bytes_written = bytes_of(elements(3, t, p), c.act);
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
    core.op.dtype = c.attention;
    core.op.m = t;
    core.op.flops = total;
    core.op.bytes_read = bytes_of(elements(4, t, p) + elements(t, h), c.act);
    core.op.bytes_written = bytes_of(elements(t, p), c.act);
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
      op.op.dtype = st.kind == OpKind::kda_gate_cumsum ? Dtype::fp32 : c.attention;
      op.op.m = t;
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
    fix.op.dtype = c.attention;
    fix.op.m = t;
    fix.op.flops = th * 4 * dh * dh;  // q S and the decayed state update
    fix.op.bytes_read = bytes_of(elements(2, t, p), c.act) + bytes_of(state_elems, Dtype::fp32);
    fix.op.bytes_written = bytes_of(elements(t, p), c.act);
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
  o = output_gate(b, x, o, p, k.output_gate, k.output_gate_rank, k.head_dim);  // normalised per head
  return b.gemm("attn.o_proj", o, t, p, d, LoraTarget::o_proj, SwapTarget::attention_out_proj);
}

}  // namespace moesim
