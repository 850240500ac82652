// SPDX-License-Identifier: MIT
#include "graph/layer_ops.hpp"

#include <algorithm>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "graph/attention_ops.hpp"
#include "graph/routing.hpp"
#include "graph/tape_builder.hpp"

namespace moesim {

bool LayerContext::lora_on(LoraTarget t) const {
  return std::find(lora_targets.begin(), lora_targets.end(), t) != lora_targets.end();
}

namespace {

// A gated (or plain) FFN on width w of `rows` tokens, TP-split on its intermediate dimension: the
// up-projection and activation, then the down-projection (apart, so that the shared experts can
// straddle the expert all-to-all).
//
// A gated up-projection is one GEMM of both halves (Megatron's linear_fc1) or two (torchtitan's
// w1 and w3), as fused_ops.gate_up says; absent, two under torchtitan's per-op checkpointing
// (recompute selective_op), whose policy saves every second matmul's output only: w1's is kept,
// w3's recomputed (tape.cpp).
bool gate_up_apart(const LayerContext& c) {
  const std::optional<GateUp>& g = c.scenario->fused_ops.gate_up;
  return g ? *g == GateUp::apart : c.scenario->recompute.policy == RecomputePolicy::selective_op;
}
int ffn_up(TapeBuilder& b, const std::string& name, int x, int64_t rows, int64_t w, int64_t f, LoraTarget lora,
           std::optional<SwapTarget> up_swap) {
  const auto& c = b.ctx();
  const bool gated = is_gated(c.model->activation);
  const int64_t fl = f / c.tp;
  if (gated && gate_up_apart(c)) {
    const int gate = b.gemm(name + ".gate_proj", x, rows, w, fl, lora, up_swap);
    const int up = b.gemm(name + ".up_proj", x, rows, w, fl, lora, up_swap);
    return b.activation(name + ".act", {gate, up}, rows, fl);
  }
  const int up = b.gemm(name + ".up_proj", x, rows, w, (gated ? 2 : 1) * fl, lora, up_swap);
  return b.activation(name + ".act", {up}, rows, fl);
}
int ffn_down(TapeBuilder& b, const std::string& name, int a, int64_t rows, int64_t w, int64_t f, LoraTarget lora) {
  return b.gemm(name + ".down_proj", a, rows, f / b.ctx().tp, w, lora);
}
int ffn(TapeBuilder& b, const std::string& name, int x, int64_t rows, int64_t w, int64_t f, LoraTarget lora,
        std::optional<SwapTarget> up_swap) {
  return ffn_down(b, name, ffn_up(b, name, x, rows, w, f, lora, up_swap), rows, w, f, lora);
}

// `total` rows split into `parts` near-equal pieces: the i-th one's size.
int64_t piece(int64_t total, int64_t parts, int64_t i) { return total / parts + (i < total % parts ? 1 : 0); }

// The shared experts, which see every token: entered and left as a TP region of their own when the
// routed experts are folded.
struct SharedExperts {
  std::string name = "moe.shared_experts";
  int64_t f = 0;  // all shared experts' intermediate width together
  int up(TapeBuilder& b, int x, int x_in, bool folded) const {
    const auto& c = b.ctx();
    const int xs = folded ? b.enter_tp(name, x_in) : x;
    return ffn_up(b, name, xs, c.tokens, c.model->hidden_size, f, LoraTarget::shared_experts,
                  SwapTarget::shared_expert_up);
  }
  int down(TapeBuilder& b, int a, bool folded) const {
    const auto& c = b.ctx();
    const int y = ffn_down(b, name, a, c.tokens, c.model->hidden_size, f, LoraTarget::shared_experts);
    return folded ? b.exit_tp(name, y) : y;
  }
};

// The MoE FFN: router, shared experts and routed experts. Unfolded, the whole block is one TP
// region (tokens gathered, experts TP-split like the dense layers). Folded (ETP < TP), the shared
// experts keep the dense TP region while the router and routed experts work on the expert-TP
// group's tokens, and EP spans the remaining TP ranks (Megatron-Core's MoE parallel folding).
//
// How the expert all-to-all hides under compute (docs/modelling.md#expert-dispatch-overlap) is a
// matter of op order on the compute queue, since each queue runs in program order and the
// all-to-all has a queue of its own; the backward runs the tape in reverse:
//   - moe_dispatch_chunks N: the EP queue runs the N dispatches back to back; chunk i's experts
//     run while chunk i+1's tokens travel, and chunk i's combine while chunk i+1 computes.
//   - moe_local_first: the assignments that stay on the rank skip the all-to-all. Their up-
//     projection and activation run while the dispatch travels, their down-projection while the
//     combine does (in the backward: the combine's adjoint under the local down-projection, the
//     dispatch's under the local up-projection).
//   - moe_shared_expert_overlap: the shared experts' up-projection after the dispatch is issued,
//     their down-projection after the combine.
int moe_block(TapeBuilder& b, int x_in, int64_t layer) {
  const auto& c = b.ctx();
  const auto& m = *c.model->moe;
  const bool folded = c.experts_folded();
  const int x = folded ? b.enter_tp("moe.experts", x_in, b.expert_tp()) : b.enter_tp("ffn", x_in);
  const int64_t t = c.routed_tokens, d = c.model->hidden_size;
  const int64_t w = m.latent_size > 0 ? m.latent_size : d;
  const auto rl = static_cast<int32_t>(layer);
  // Router: scores for every expert, top-k with (renormalised) weights.
  const int weights = b.tensor(t, m.top_k, "moe.topk_weights", Dtype::fp32);
  const int indices = b.tensor(t, m.top_k, "moe.topk_indices", Dtype::int32, false);
  {
    TapeOp r;
    r.op.kind = OpKind::router;
    r.op.dtype = c.unquantized;
    r.op.trainable_weight = c.train_base;
    r.op.m = t;
    r.op.n = m.num_experts;
    r.op.k = d;
    r.op.flops = 2.0 * elements(t, d, m.num_experts);
    r.op.bytes_read = bytes_of(elements(t, d), c.act) + bytes_of(elements(d, m.num_experts), c.unquantized);
    r.op.bytes_written = bytes_of(elements(t, m.top_k), Dtype::fp32) + bytes_of(elements(t, m.top_k), Dtype::int32);
    r.name = "moe.router";
    r.inputs = {x};
    r.outputs = {weights, indices};
    r.bwd_needs = {x, weights, indices};
    r.bwd_kind = OpKind::router;
    r.bwd_flops = r.op.flops;
    r.wgrad_flops = r.op.flops;
    b.add(r);
  }
  std::optional<SharedExperts> shared;
  if (m.num_shared_experts > 0) {
    const int64_t fs = m.shared_intermediate_size > 0 ? m.shared_intermediate_size : m.expert_intermediate_size;
    shared = SharedExperts{.f = m.num_shared_experts * fs};
  }
  const bool shared_overlap = shared && c.shared_expert_overlap;
  int shared_out = -1, shared_act = -1;
  if (shared && !shared_overlap) shared_out = shared->down(b, shared->up(b, x, x_in, folded), folded);
  int xl = x;
  if (m.latent_size > 0) {
    xl = b.gemm("moe.latent_down_proj", x, t, d, m.latent_size, LoraTarget::latent_proj, SwapTarget::latent_down);
    xl = b.norm("moe.latent_norm", xl, t, m.latent_size);
  }
  // Expected rows sent and received: the T k assignments under any routing, or the padded
  // buffers of capacity padding (which then also hold the padding in memory).
  const int64_t real_rows = t * m.top_k;
  const int64_t assignments = expected_expert_rows(c.scenario->routing, m.num_experts, m.top_k, c.ep, t);
  const bool local_first = c.local_first && c.ep > 1;
  const int64_t local_rows = local_first ? routed_part_rows(assignments, c.ep, RoutingPart::local) : 0;
  const int64_t remote_rows = assignments - local_rows;
  const int64_t chunks = std::clamp<int64_t>(c.dispatch_chunks, 1, std::max<int64_t>(remote_rows, 1));
  // The permuted rows: one buffer, or under local-first the rank's own rows apart from those it sends.
  int to_send = xl, to_keep = xl;
  if (!c.fused.permute_gemm) {
    TapeOp p;
    p.op.kind = OpKind::permute;
    p.op.dtype = c.act;
    p.op.routing_layer = rl;
    p.op.bytes_read = bytes_of(elements(real_rows, w), c.act);  // the tokens' copies; padding is written only
    p.op.bytes_written = bytes_of(elements(assignments, w), c.act);
    p.name = "moe.permute";
    p.inputs = {xl, indices};
    to_send = b.act_tensor(remote_rows, w, "moe.permuted");
    p.outputs = {to_send};
    if (local_first) {
      to_keep = b.act_tensor(local_rows, w, "moe.permuted_local");
      p.outputs.push_back(to_keep);
    }
    p.bwd_needs = {indices};
    p.bwd_kind = OpKind::unpermute;
    p.cheap = true;
    b.add(p);
  }
  auto chunk_name = [&](const std::string& base, int64_t i) {
    return chunks == 1 ? base : base + ".chunk" + std::to_string(i);
  };
  // "moe.experts." or "moe.experts.local.", then "chunkI." when chunked.
  auto experts_prefix = [&](bool local, int64_t i) {
    return chunk_name(local ? "moe.experts.local" : "moe.experts", i) + ".";
  };
  const std::string up_name = c.fused.permute_gemm ? "permute_up_proj" : "up_proj";
  const int64_t f = m.expert_intermediate_size / c.etp;
  const bool gated = is_gated(c.model->activation);
  // One part's expert FFN on `rows` rows of `in`: up-projection and activation, then down.
  auto experts_up = [&](const std::string& prefix, int in, int64_t rows, RoutingPart part) {
    const int up = b.grouped_gemm(prefix + up_name, in, rows, w, (gated ? 2 : 1) * f, rl, SwapTarget::expert_gmm_up,
                                  part);
    return b.activation(prefix + "act", {up}, rows, f);
  };
  auto experts_down = [&](const std::string& prefix, int a, int64_t rows, RoutingPart part) {
    return b.grouped_gemm(prefix + "down_proj", a, rows, f, w, rl, SwapTarget::expert_gmm_down, part);
  };
  // Ops on different queues are written in the order a host would issue them - each chunk's
  // dispatch just before the GEMMs that wait for it, the combines after the compute they overlap -
  // because the memory ledger lets an op reuse only memory released by ops issued before it: an
  // order that disagreed with time would leave holes in the slab. The compute and EP queues' own
  // orders do not depend on it; the copy queue's swap-outs follow it.
  if (shared_overlap) shared_act = shared->up(b, x, x_in, folded);
  const RoutingPart remote_part = local_first ? RoutingPart::remote : RoutingPart::all;
  std::vector<int> local_act, remote_down;
  for (int64_t i = 0; i < chunks; ++i) {
    if (local_first) {
      local_act.push_back(experts_up(experts_prefix(true, i), to_keep, piece(local_rows, chunks, i), RoutingPart::local));
    }
    // comm_bytes: the chunk's send buffer as nccl-tests sizes it (the rank's own block included);
    // the engine sizes the wire traffic from the routing draw.
    const int64_t rows = piece(remote_rows, chunks, i);
    const int received = b.communicate(OpKind::all_to_all, GroupKind::ep, chunk_name("moe.dispatch", i), to_send,
                                       matrix_desc(rows, w, c.act), bytes_of(elements(piece(assignments, chunks, i), w), c.act), rl);
    const int act = experts_up(experts_prefix(false, i), received, rows, remote_part);
    remote_down.push_back(experts_down(experts_prefix(false, i), act, rows, remote_part));
  }
  std::vector<int> combined_parts;
  for (int64_t i = 0; i < chunks && local_first; ++i) {
    combined_parts.push_back(experts_down(experts_prefix(true, i), local_act[static_cast<size_t>(i)],
                                          piece(local_rows, chunks, i), RoutingPart::local));
  }
  if (shared_overlap) shared_out = shared->down(b, shared_act, folded);
  for (int64_t i = 0; i < chunks; ++i) {
    combined_parts.push_back(b.communicate(OpKind::all_to_all, GroupKind::ep, chunk_name("moe.combine", i),
                                           remote_down[static_cast<size_t>(i)],
                                           matrix_desc(piece(remote_rows, chunks, i), w, c.act),
                                           bytes_of(elements(piece(assignments, chunks, i), w), c.act), rl));
  }
  const int combined = b.act_tensor(t, w, "moe.unpermuted");
  {
    TapeOp u;  // weighted sum of each token's top_k expert outputs
    u.op.kind = OpKind::unpermute;
    u.op.dtype = c.act;
    u.op.routing_layer = rl;
    u.op.flops = 2.0 * elements(real_rows, w);  // real rows only: the padding is not gathered
    u.op.bytes_read = bytes_of(elements(real_rows, w), c.act);
    u.op.bytes_written = bytes_of(elements(t, w), c.act);
    u.name = "moe.unpermute";
    u.inputs = combined_parts;
    u.inputs.push_back(weights);
    u.inputs.push_back(indices);
    u.outputs = {combined};
    u.bwd_needs = u.inputs;
    u.bwd_kind = OpKind::permute;
    b.add(u);
  }
  int y = combined;
  if (m.latent_size > 0) {
    y = b.gemm("moe.latent_up_proj", combined, t, m.latent_size, d, LoraTarget::latent_proj);
  }
  if (folded) y = b.exit_tp("moe.experts", y, b.expert_tp());
  if (shared_out >= 0) {
    y = b.pointwise(OpKind::elementwise, "moe.add_shared", {y, shared_out}, folded ? c.sp_tokens() : t, d, 1.0, {},
                    c.act);
  }
  return folded ? y : b.exit_tp("ffn", y);
}

int dense_ffn_block(TapeBuilder& b, int x) {
  const auto& c = b.ctx();
  const int y = ffn(b, "ffn", b.enter_tp("ffn", x, b.projection_tp()), c.tokens, c.model->hidden_size,
                    c.model->dense_ffn->intermediate_size, LoraTarget::dense_ffn, SwapTarget::dense_ffn_up);
  return b.exit_tp("ffn", y, b.projection_tp());
}

// Attention Residuals (block variant): each sub-layer's input is a softmax-weighted sum of the
// block summaries and the embedding; ~8 x d per token stays resident
// (docs/modelling.md#attention-residuals).
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
  op.op.flops = 4.0 * elements(rows, d, sources);
  op.op.bytes_read = bytes_of(elements(rows, d, sources), c.act);
  op.op.bytes_written = bytes_of(elements(rows, d), c.act);
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

// The attention block of `kind` on the TP region's input x; returns its output projection's.
int attention_block(TapeBuilder& b, AttentionKind kind, int x) {
  switch (kind) {
    case AttentionKind::mha:
    case AttentionKind::gqa: return gqa_block(b, x);
    case AttentionKind::mla: return mla_block(b, x);
    case AttentionKind::mla_dsa: return mla_dsa_block(b, x);
    case AttentionKind::kda: return kda_block(b, x);
  }
  return x;  // unreachable: every AttentionKind is listed above
}

// A sub-layer's residual add, h + y. With hidden dropout, h + dropout(y) as Megatron-LM fuses it
// (bias_dropout_add): the add also writes the dropout's mask, 1 byte an element, which its backward
// reads; the mask lives from the forward to the backward like any saved tensor.
int residual_add(TapeBuilder& b, const std::string& name, int h, int y) {
  const auto& c = b.ctx();
  const int64_t rows = c.sp_tokens(), d = c.model->hidden_size;
  if (c.hidden_dropout <= 0) return b.pointwise(OpKind::elementwise, name, {h, y}, rows, d, 1.0, {}, c.act);
  const int out = b.act_tensor(rows, d, name + ".out");
  const int mask = b.tensor(rows, d, name + ".dropout_mask", Dtype::int8, false);
  TapeOp op;
  op.op.kind = OpKind::elementwise;
  op.op.dtype = c.act;
  op.op.flops = 3.0 * elements(rows, d);
  op.op.bytes_read = 2 * bytes_of(elements(rows, d), c.act);
  op.op.bytes_written = bytes_of(elements(rows, d), c.act) + bytes_of(elements(rows, d), Dtype::int8);
  op.name = name;
  op.inputs = {h, y};
  op.outputs = {out, mask};
  op.bwd_needs = {mask};
  op.bwd_kind = OpKind::elementwise;
  op.bwd_flops = 2.0 * elements(rows, d);
  op.cheap = true;
  b.add(op);
  return out;
}

// Under torch.compile (fused_ops.elementwise compiled: each transformer block one graph) Inductor
// fuses across the residual stream, as the H100 llama8b traces show
// (docs/calibration/runs/2026-12-05-compile/): the attention's residual add goes into the FFN
// norm that reads its sum, one kernel reading h and y, and the sum is recomputed by the block's
// last add (reading h, y and the FFN's output) rather than kept; each residual add's backward, the
// residual stream's gradient accumulation, goes into the backward of the norm on the same stream,
// which reads the passed-through gradient besides its own. The block's last add stays a kernel of
// its own (the next block is another graph).
void fuse_compiled_residuals(LayerTape& tape, double stream_bytes, bool norm_reads_attn_sum) {
  auto op = [&](const std::string& name) -> TapeOp& {
    for (TapeOp& o : tape.mutable_ops()) {
      if (o.name == name) return o;
    }
    throw std::logic_error("fuse_compiled_residuals: no op " + name);
  };
  if (norm_reads_attn_sum) {
    TapeOp& add = op("attn_residual_add");
    add.op.num_kernels = 0;
    add.op.bytes_read = add.op.bytes_written = 0;
    op("ffn_norm").op.bytes_read += stream_bytes;
    op("ffn_residual_add").op.bytes_read += stream_bytes;
  }
  for (const char* add : {"attn_residual_add", "ffn_residual_add"}) op(add).bwd_work = PassWork{0, 0, 0};
  // A compiled norm's backward work is set (run_as_scenario_says); .value() throws if it ever is not.
  for (const char* norm : {"attn_norm", "ffn_norm"}) op(norm).bwd_work.value().bytes_read += stream_bytes;
}

// A parallel transformer block (ModelSpec::parallel_block): one norm, one TP region in which the
// attention and the FFN read the same gathered input, the FFN's down-projection adding the
// attention's output in its epilogue, and one residual add.
LayerTape parallel_block_tape(const LayerContext& c, LayerKinds kinds) {
  const int64_t d = c.model->hidden_size, f = c.model->dense_ffn->intermediate_size;
  LayerTape tape(matrix_desc(c.sp_tokens(), d, c.act));
  TapeBuilder b(c, tape);
  const int x = b.enter_tp("block", b.norm("block_norm", 0, c.sp_tokens(), d), b.projection_tp());
  const int attn = attention_block(b, kinds.attention, x);
  const int a = ffn_up(b, "ffn", x, c.tokens, d, f, LoraTarget::dense_ffn, SwapTarget::dense_ffn_up);
  const int y = b.gemm_accumulate("ffn.down_proj", a, attn, c.tokens, f / c.tp, d, LoraTarget::dense_ffn);
  const int summed = b.exit_tp("block", y, b.projection_tp());
  tape.set_output(residual_add(b, "residual_add", 0, summed));
  return tape;
}

}  // namespace

LayerTape build_layer_tape(const LayerContext& c, int64_t layer) {
  const auto& model = *c.model;
  const LayerKinds kinds = model.layer_kinds[static_cast<size_t>(layer - 1)];
  if (model.parallel_block) return parallel_block_tape(c, kinds);
  const int64_t d = model.hidden_size;
  LayerTape tape(matrix_desc(c.sp_tokens(), d, c.act));
  TapeBuilder b(c, tape);
  // Attention sub-layer.
  int h = attention_residual(b, "attn_res", 0, layer);
  int x = b.norm("attn_norm", h, c.sp_tokens(), d);
  x = b.enter_tp("attn", x, b.projection_tp());
  int y = attention_block(b, kinds.attention, x);
  y = b.exit_tp("attn", y, b.projection_tp());
  const int h_mid = residual_add(b, "attn_residual_add", h, y);
  // FFN sub-layer.
  int h2 = attention_residual(b, "ffn_res", h_mid, layer);
  x = b.norm("ffn_norm", h2, c.sp_tokens(), d);
  y = kinds.ffn == FfnKind::moe ? moe_block(b, x, layer) : dense_ffn_block(b, x);
  const int out = residual_add(b, "ffn_residual_add", h2, y);
  if (c.fused.elementwise == ElementwiseExecution::compiled && c.hidden_dropout <= 0) {
    fuse_compiled_residuals(tape, bytes_of(elements(c.sp_tokens(), d), c.act), h2 == h_mid);
  }
  tape.set_output(out);
  return tape;
}

// Under TP the embedding is vocabulary-parallel (Megatron's VocabParallelEmbedding): each TP rank
// holds vocab / tp rows, looks up every token of the sequence (its own rows, zeros elsewhere) and
// the partial sums leave the TP region like a layer's output (reduce-scatter with SP).
LayerTape build_embedding_tape(const LayerContext& c) {
  const int64_t rows = c.tp > 1 ? c.tokens : c.sp_tokens(), d = c.model->hidden_size;
  LayerTape tape(matrix_desc(rows, 1, Dtype::int32), "token_ids", false);
  TapeBuilder b(c, tape);
  const int h = b.act_tensor(rows, d, "embedding.out");
  TapeOp op;
  op.op.kind = OpKind::embedding;
  op.op.dtype = c.act;
  op.op.trainable_weight = c.train_base;
  op.op.bytes_read = bytes_of(rows, Dtype::int32) + bytes_of(elements(rows, d), c.act);
  op.op.bytes_written = bytes_of(elements(rows, d), c.act);
  op.name = "embedding";
  op.inputs = {0};
  op.outputs = {h};
  op.has_bwd = c.train_base;  // frozen under LoRA: no gradient to scatter
  op.bwd_needs = {0};
  op.bwd_kind = OpKind::embedding;
  b.add(op);
  const int summed = b.exit_tp("embedding", h);
  if (c.model->position == PositionKind::learned) {
    const int hp = b.pointwise(OpKind::elementwise, "position_embedding", {summed}, c.sp_tokens(), d, 1.0, {}, c.act);
    tape.set_output(hp);
  } else {
    tape.set_output(summed);
  }
  return tape;
}

LayerTape build_final_norm_tape(const LayerContext& c) {
  const int64_t d = c.model->hidden_size;
  LayerTape tape(matrix_desc(c.sp_tokens(), d, c.act));
  TapeBuilder b(c, tape);
  int x = b.norm("final_norm", 0, c.sp_tokens(), d);
  x = b.enter_tp("head", x);
  tape.set_output(x);
  return tape;
}

}  // namespace moesim
