// SPDX-License-Identifier: MIT
#include "graph/tape.hpp"

#include <algorithm>
#include <cassert>

namespace moesim {

LayerTape::LayerTape(TensorDesc input, std::string name, bool requires_grad) {
  tensors_.push_back(TapeTensor{input, std::move(name), requires_grad});
}

int LayerTape::tensor(TensorDesc desc, std::string name, bool requires_grad) {
  tensors_.push_back(TapeTensor{desc, std::move(name), requires_grad});
  return static_cast<int>(tensors_.size() - 1);
}

TapeOp& LayerTape::add(TapeOp op) {
  ops_.push_back(std::move(op));
  return ops_.back();
}

OpKind backward_kind_of_communication(OpKind forward) {
  switch (forward) {
    case OpKind::all_gather: return OpKind::reduce_scatter;
    case OpKind::reduce_scatter: return OpKind::all_gather;
    case OpKind::send: return OpKind::recv;
    case OpKind::recv: return OpKind::send;
    case OpKind::all_to_all:  // reverses its sizes
    case OpKind::all_reduce:  // stays (see fwd_noop)
    case OpKind::embedding:
    case OpKind::norm:
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::grouped_gemm:
    case OpKind::activation:
    case OpKind::elementwise:
    case OpKind::short_conv:
    case OpKind::router:
    case OpKind::permute:
    case OpKind::unpermute:
    case OpKind::flash_attention:
    case OpKind::kda:
    case OpKind::kda_gate_cumsum:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::kda_state_correction:
    case OpKind::dsa_indexer:
    case OpKind::indexer_score:
    case OpKind::topk:
    case OpKind::kv_gather:
    case OpKind::sparse_attention:
    case OpKind::attention_residual:
    case OpKind::cross_entropy:
    case OpKind::cce_loss:
    case OpKind::optimizer:
    case OpKind::host_optimizer:
    case OpKind::grad_accumulate:
    case OpKind::dp_copy:
    case OpKind::swap_out:
    case OpKind::swap_in: return forward;
  }
  return forward;  // unreachable: every OpKind is listed above
}

namespace {

// Which tensors live from forward to backward, which ops are recomputed, which tensors swapped.
struct Analysis {
  std::vector<int> producer;      // per tensor: producing tape op, -1 for the layer input
  std::vector<int> last_fwd_use;  // per tensor: last forward reader, -1 if none
  std::vector<int> last_bwd_use;  // per tensor: last backward reader (smallest op index), -1 if none
  std::vector<bool> needed;       // read by some backward
  std::vector<bool> kept;         // alive from forward to backward
  std::vector<bool> recomputed;   // per tape op
  std::vector<bool> swapped;      // per tensor
};

bool swap_active(const TapeOp& op, const TapePolicy& policy) {
  return op.swap && std::find(policy.swap.begin(), policy.swap.end(), *op.swap) != policy.swap.end();
}

// Which ops a selective policy may drop the outputs of (and recompute in backward):
//   - selective (Megatron's): the cheap ops - norms, activations, attention cores;
//   - selective_op (torchtitan's per-op SAC: its activation-checkpoint code saves the outputs of
//     aten.mm, SDPA and max, except every second aten.mm of a layer's forward, and recomputes the
//     rest): every op but the attention cores, the communication and the matmuls it saves. Matmul
//     calls are counted in forward order (a gated FFN's w1 and w3 are two ops under this policy,
//     layer_ops.cpp), the pieces of a TP-overlapped projection as their projection. FP8 matmuls run
//     as aten._scaled_mm, which the save list does not hold: all of them are recomputed.
std::vector<bool> recomputed_by_policy(const std::vector<TapeOp>& ops, RecomputePolicy policy) {
  std::vector<bool> r(ops.size());
  if (policy == RecomputePolicy::selective) {
    for (size_t i = 0; i < ops.size(); ++i) r[i] = ops[i].cheap;
    return r;
  }
  int64_t matmuls = 0;
  for (size_t i = 0; i < ops.size(); ++i) {
    const TapeOp& op = ops[i];
    const Op& o = op.op;
    if (is_communication(o.kind) || op.fwd_noop) continue;
    if (o.kind == OpKind::flash_attention || o.kind == OpKind::sparse_attention || o.kind == OpKind::kda) continue;
    if (o.kind != OpKind::gemm) {
      r[i] = true;
      continue;
    }
    if (op.continues >= 0) {  // the same calls as the piece it continues, which comes before it
      r[i] = r[static_cast<size_t>(op.continues)];
      continue;
    }
    ++matmuls;  // this op's matmul call, 1-based
    r[i] = !(dtype_bytes(o.dtype) >= 2 && matmuls % 2 == 1);  // kept: BF16 and an odd call
  }
  return r;
}

Analysis analyse(const LayerTape& tape, const TapePolicy& policy) {
  const auto& ts = tape.tensors();
  const auto& ops = tape.ops();
  const size_t nt = ts.size();
  Analysis a{std::vector<int>(nt, -1), std::vector<int>(nt, -1), std::vector<int>(nt, -1), std::vector<bool>(nt),
             std::vector<bool>(nt), std::vector<bool>(ops.size()), std::vector<bool>(nt)};
  for (size_t i = 0; i < ops.size(); ++i) {
    for (int t : ops[i].outputs) a.producer[static_cast<size_t>(t)] = static_cast<int>(i);
    if (!ops[i].fwd_noop) {
      for (int t : ops[i].inputs) a.last_fwd_use[static_cast<size_t>(t)] = static_cast<int>(i);
    }
  }
  for (size_t i = ops.size(); i-- > 0;) {
    if (!ops[i].has_bwd) continue;
    for (int t : ops[i].bwd_needs) {
      a.needed[static_cast<size_t>(t)] = true;
      a.last_bwd_use[static_cast<size_t>(t)] = static_cast<int>(i);
    }
  }
  // A rerun op's output is made again in the backward (emit_backward), from its inputs.
  for (const TapeOp& op : ops) {
    if (!op.rerun_for_backward) continue;
    for (int o : op.outputs) a.needed[static_cast<size_t>(o)] = false;
    for (int in : op.inputs) a.needed[static_cast<size_t>(in)] = true;
  }
  if (policy.recompute == RecomputePolicy::full) {
    // Keep the layer input; recompute the whole layer except swap-target ops, whose needed
    // outputs come back from host memory instead.
    // A swapped op's output comes back for every reader it has in the backward: a backward op,
    // or an op the recompute runs again (its output is their input); one that nobody reads needs
    // no copy, and its op then has nothing to recompute.
    a.kept[0] = true;
    for (size_t i = 0; i < ops.size(); ++i) a.recomputed[i] = !ops[i].fwd_noop && !swap_active(ops[i], policy);
    std::vector<bool> read_by_recompute(nt);
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!a.recomputed[i]) continue;
      for (int t : ops[i].inputs) read_by_recompute[static_cast<size_t>(t)] = true;
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      if (!swap_active(ops[i], policy)) continue;
      for (int o : ops[i].outputs) {
        const auto uo = static_cast<size_t>(o);
        if (a.needed[uo] || read_by_recompute[uo]) a.kept[uo] = a.swapped[uo] = true;
      }
    }
    return a;
  }
  a.kept = a.needed;
  if (policy.recompute == RecomputePolicy::selective || policy.recompute == RecomputePolicy::selective_op) {
    // Drop what the policy's ops produce and keep their inputs instead, until nothing changes.
    const std::vector<bool> droppable = recomputed_by_policy(ops, policy.recompute);
    std::vector<int> work;
    for (size_t t = 0; t < nt; ++t) {
      if (a.kept[t]) work.push_back(static_cast<int>(t));
    }
    while (!work.empty()) {
      const auto t = static_cast<size_t>(work.back());
      work.pop_back();
      const int p = a.producer[t];
      if (!a.kept[t] || p < 0) continue;
      const TapeOp& op = ops[static_cast<size_t>(p)];
      if (!droppable[static_cast<size_t>(p)] || swap_active(op, policy)) continue;
      a.kept[t] = false;
      if (a.recomputed[static_cast<size_t>(p)]) continue;
      // A projection split for TP overlap recomputes as a whole: all its pieces.
      const int root = op.continues >= 0 ? op.continues : p;
      for (size_t q = static_cast<size_t>(root); q < ops.size(); ++q) {
        if (q != static_cast<size_t>(root) && ops[q].continues != root) continue;
        a.recomputed[q] = true;
        for (int o : ops[q].outputs) a.kept[static_cast<size_t>(o)] = false;
        // Its data inputs only: a joined piece (TapeOp::num_joined) orders the op, the recompute
        // does not read it again.
        const size_t num_data = ops[q].inputs.size() - static_cast<size_t>(ops[q].num_joined);
        for (size_t k = 0; k < num_data; ++k) {
          const auto in = static_cast<size_t>(ops[q].inputs[k]);
          if (!a.kept[in]) {
            a.kept[in] = true;
            work.push_back(static_cast<int>(in));
          }
        }
      }
    }
  }
  // A selective policy that recomputes a reader of a rerun op's output (an attention core) runs
  // the op again in the recompute too, rather than keeping its output.
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].rerun_for_backward || a.recomputed[i]) continue;
    bool kept = false;
    for (int o : ops[i].outputs) kept = kept || a.kept[static_cast<size_t>(o)];
    if (!kept) continue;
    a.recomputed[i] = true;
    for (int o : ops[i].outputs) a.kept[static_cast<size_t>(o)] = false;
    for (int in : ops[i].inputs) {
      const int p = a.producer[static_cast<size_t>(in)];
      if (p < 0 || !a.recomputed[static_cast<size_t>(p)]) a.kept[static_cast<size_t>(in)] = true;
    }
  }
  for (size_t t = 0; t < nt; ++t) {
    const int p = a.producer[t];
    a.swapped[t] = a.kept[t] && p >= 0 && swap_active(ops[static_cast<size_t>(p)], policy);
  }
  return a;
}

Stream stream_for(OpKind kind, const TapePolicy& policy) {
  if (!is_communication(kind)) return Stream::compute;
  return policy.comm_on_compute_stream ? Stream::compute : Stream::comm;
}

std::vector<TensorDesc> descs(const LayerTape& tape, const std::vector<int>& ids) {
  std::vector<TensorDesc> out;
  out.reserve(ids.size());
  for (int t : ids) out.push_back(tape.tensors()[static_cast<size_t>(t)].desc);
  return out;
}

// Orders the last op after `producer` (when there is one).
void order_after_producer(ProgramWriter& w, uint32_t op, int64_t producer) {
  if (producer >= 0) w.order_after(op, static_cast<uint32_t>(producer));
}

// A swap copy of one tensor on the copy stream.
Op host_copy(OpKind kind, Phase phase, const EmitScope& scope, double bytes) {
  Op copy;
  copy.kind = kind;
  copy.phase = phase;
  copy.stream = Stream::copy;
  copy.layer = scope.layer;
  copy.micro = scope.micro;
  (kind == OpKind::swap_out ? copy.bytes_read : copy.bytes_written) = bytes;
  copy.comm_bytes = bytes;
  return copy;
}

// Adds a quantised matmul's casts of one pass to its op: the activation operand's always, the
// weight's when this pass casts it.
void apply_casts(Op& op, const PassWork& activation, const PassWork& weight, bool weight_cast_here) {
  op.num_kernels += activation.num_kernels;
  op.cast_bytes = activation.bytes_read + activation.bytes_written;
  if (!weight_cast_here) return;
  op.num_kernels += weight.num_kernels;
  op.cast_bytes += weight.bytes_read + weight.bytes_written;
}

uint32_t emit_op(ProgramWriter& w, const LayerTape& tape, const TapeOp& entry, Phase phase, const TapePolicy& policy,
                 const EmitScope& scope) {
  Op op = entry.op;
  // A cached weight was cast by micro-batch 0's forward; a recompute reuses it too.
  apply_casts(op, entry.casts.input, entry.casts.weight,
            !entry.casts.weight_once_per_step || (phase == Phase::fwd && scope.micro == 0));
  op.phase = phase;
  op.layer = scope.layer;
  op.micro = scope.micro;
  op.stream = stream_for(op.kind, policy);
  const auto in = descs(tape, entry.inputs);
  const auto out = descs(tape, entry.outputs);
  return w.add(op, scope.prefix + entry.name, in, out);
}

// Op `idx`, forward op `e` run again (a recompute, or a rerun for the backward): ordered after its
// inputs' producers, its outputs in new buffers named `label` and the tensor's name.
void place_again(ProgramWriter& w, const LayerTape& tape, const TapeOp& e, uint32_t idx, const EmitScope& scope,
                 TapeState& s, const std::string& label) {
  for (int t : e.inputs) order_after_producer(w, idx, s.producer[static_cast<size_t>(t)]);
  for (int t : e.outputs) {
    const auto& tt = tape.tensors()[static_cast<size_t>(t)];
    const uint32_t b = w.buffer(tt.desc.bytes(), MemCategory::activation, scope.prefix + label + tt.name);
    w.effect(idx, b, MemAction::alloc);
    s.buffer[static_cast<size_t>(t)] = b;
    s.producer[static_cast<size_t>(t)] = idx;
  }
}

}  // namespace

TapeState emit_forward(ProgramWriter& w, const LayerTape& tape, const TapePolicy& policy, const EmitScope& scope,
                       uint32_t input_buffer, int64_t input_producer) {
  const Analysis a = analyse(tape, policy);
  const auto& ops = tape.ops();
  const auto& ts = tape.tensors();
  TapeState s;
  s.buffer.assign(ts.size(), -1);
  s.producer.assign(ts.size(), -1);
  s.swapped = a.swapped;
  s.kept = a.kept;
  s.buffer[0] = input_buffer;
  s.producer[0] = input_producer;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (a.recomputed[i]) s.recompute.push_back(static_cast<int>(i));
  }
  int last_entry = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (!ops[i].fwd_noop) last_entry = static_cast<int>(i);
  }
  bool first = true;
  for (size_t i = 0; i < ops.size(); ++i) {
    const TapeOp& e = ops[i];
    if (e.fwd_noop) continue;
    const uint32_t idx = emit_op(w, tape, e, Phase::fwd, policy, scope);
    if (first) {
      s.first_op = idx;
      for (uint32_t d : scope.first_op_deps) w.depend(idx, d);
      for (uint32_t b : scope.alloc_at_start) w.effect(idx, b, MemAction::alloc);
      first = false;
    }
    for (int t : e.inputs) order_after_producer(w, idx, s.producer[static_cast<size_t>(t)]);
    for (int t : e.outputs) {
      const auto& tt = ts[static_cast<size_t>(t)];
      const uint32_t b = w.buffer(tt.desc.bytes(), MemCategory::activation, scope.prefix + tt.name);
      w.effect(idx, b, MemAction::alloc);
      s.buffer[static_cast<size_t>(t)] = b;
      s.producer[static_cast<size_t>(t)] = idx;
    }
    // Release what neither a later forward op nor the backward reads.
    auto release = [&](int t) {
      const auto ut = static_cast<size_t>(t);
      if (a.kept[ut] || t == tape.output() || s.buffer[ut] < 0) return;
      w.effect(idx, static_cast<uint32_t>(s.buffer[ut]), MemAction::free);
      s.buffer[ut] = -1;
    };
    for (int t : e.inputs) {
      if (a.last_fwd_use[static_cast<size_t>(t)] == static_cast<int>(i)) release(t);
    }
    for (int t : e.outputs) {
      if (a.last_fwd_use[static_cast<size_t>(t)] < 0) release(t);
    }
    if (static_cast<int>(i) == last_entry) {
      for (uint32_t b : scope.free_at_end) w.effect(idx, b, MemAction::free);
      s.last_op = idx;
    }
    // Swap out kept tensors of swap-target ops once the forward is done with them.
    for (size_t t = 0; t < ts.size(); ++t) {
      if (!a.swapped[t] || s.buffer[t] < 0) continue;
      const bool last_use_here = a.last_fwd_use[t] == static_cast<int>(i) ||
                                 (a.last_fwd_use[t] < 0 && a.producer[t] == static_cast<int>(i));
      if (!last_use_here) continue;
      const TensorDesc d = ts[t].desc;
      const uint32_t c = w.add(host_copy(OpKind::swap_out, Phase::fwd, scope, d.bytes()),
                               scope.prefix + "swap_out." + ts[t].name, std::span(&d, 1));
      w.depend(c, idx);
      w.effect(c, static_cast<uint32_t>(s.buffer[t]), MemAction::to_host);
    }
  }
  s.output_buffer = static_cast<uint32_t>(s.buffer[static_cast<size_t>(tape.output())]);
  s.output_producer = static_cast<uint32_t>(s.producer[static_cast<size_t>(tape.output())]);
  return s;
}

BackwardResult emit_backward(ProgramWriter& w, const LayerTape& tape, const TapePolicy& policy,
                             const EmitScope& scope, TapeState& s, uint32_t output_grad_buffer,
                             int64_t output_grad_producer, int64_t prefetch_anchor) {
  const Analysis a = analyse(tape, policy);
  const auto& ops = tape.ops();
  const auto& ts = tape.tensors();
  BackwardResult r;
  bool first_compute = true;
  bool first_any = true;
  auto on_emit = [&](uint32_t idx, bool compute) {
    if (first_any) {
      r.first_op = idx;
      first_any = false;
    }
    if (compute && first_compute) {
      for (uint32_t d : scope.first_op_deps) w.depend(idx, d);
      r.first_compute_op = idx;
      first_compute = false;
    }
  };

  // 1. Swap-ins, prefetched from the anchor.
  for (size_t t = 0; t < ts.size(); ++t) {
    if (!s.swapped[t]) continue;
    const TensorDesc d = ts[t].desc;
    const uint32_t c = w.add(host_copy(OpKind::swap_in, Phase::bwd, scope, d.bytes()), scope.prefix + "swap_in." + ts[t].name,
                             {}, std::span(&d, 1));
    on_emit(c, false);
    if (prefetch_anchor >= 0) w.depend(c, static_cast<uint32_t>(prefetch_anchor));
    w.effect(c, static_cast<uint32_t>(s.buffer[t]), MemAction::to_device);
    s.producer[t] = c;
  }

  // 2. Recompute, in forward order. Tensors only the recompute reads are released after it.
  std::vector<int> last_recompute_use(ts.size(), -1);
  for (int i : s.recompute) {
    for (int t : ops[static_cast<size_t>(i)].inputs) last_recompute_use[static_cast<size_t>(t)] = i;
  }
  for (int i : s.recompute) {
    const TapeOp& e = ops[static_cast<size_t>(i)];
    const uint32_t idx = emit_op(w, tape, e, Phase::recompute, policy, scope);
    on_emit(idx, true);
    place_again(w, tape, e, idx, scope, s, "recompute.");
    auto release_if_unneeded = [&](int t) {
      const auto ut = static_cast<size_t>(t);
      if (a.needed[ut] || s.buffer[ut] < 0) return;
      w.effect(idx, static_cast<uint32_t>(s.buffer[ut]), MemAction::free);
      s.buffer[ut] = -1;
    };
    for (int t : e.inputs) {
      if (last_recompute_use[static_cast<size_t>(t)] == i) release_if_unneeded(t);
    }
    for (int t : e.outputs) {
      if (last_recompute_use[static_cast<size_t>(t)] < 0) release_if_unneeded(t);
    }
  }

  // 3. Backward, in reverse order.
  std::vector<int64_t> grad_buffer(ts.size(), -1);
  std::vector<int64_t> grad_producer(ts.size(), -1);
  grad_buffer[static_cast<size_t>(tape.output())] = output_grad_buffer;
  grad_producer[static_cast<size_t>(tape.output())] = output_grad_producer;
  // The backward of TP's forward all-reduce (no sequence parallelism) is the identity.
  auto identity = [](const TapeOp& e) { return e.op.kind == OpKind::all_reduce && !e.fwd_noop; };
  int last_bwd_entry = -1;
  for (size_t i = 0; i < ops.size(); ++i) {
    if (ops[i].has_bwd && !identity(ops[i])) {
      last_bwd_entry = static_cast<int>(i);
      break;
    }
  }
  // Zero-bubble split: which tape ops hand their weight gradient to a deferred W op, and, per
  // tensor, the deferred W (the last in backward order) that must free it instead of its last
  // backward reader.
  auto splits = [&](const TapeOp& e) {
    return policy.split_weight_grad && e.has_bwd && !is_communication(e.op.kind) && e.op.trainable_weight &&
           e.wgrad_flops > 0;
  };
  std::vector<int> freed_by_w(ts.size(), -1);  // tape op index whose W frees the tensor
  for (size_t i = ops.size(); i-- > 0;) {
    if (!splits(ops[i])) continue;
    for (int t : ops[i].bwd_needs) freed_by_w[static_cast<size_t>(t)] = static_cast<int>(i);  // smallest i = last W
  }
  std::vector<int64_t> w_of(ops.size(), -1);  // tape op -> its entry in r.weight_grads
  bool first_bwd = true;
  for (size_t i = ops.size(); i-- > 0;) {
    const TapeOp& e = ops[i];
    if (!e.has_bwd) continue;
    const bool comm = is_communication(e.op.kind);
    if (identity(e)) {
      for (int in : e.inputs) {
        grad_buffer[static_cast<size_t>(in)] = grad_buffer[static_cast<size_t>(e.outputs[0])];
        grad_producer[static_cast<size_t>(in)] = grad_producer[static_cast<size_t>(e.outputs[0])];
      }
      continue;
    }
    // What a rerun op makes for this backward (ring attention's keys and values, exchanged again):
    // run just before it, its output freed by its last backward reader below.
    for (int t : e.bwd_needs) {
      const auto ut = static_cast<size_t>(t);
      const int p = s.buffer[ut] < 0 ? a.producer[ut] : -1;
      if (p < 0 || !ops[static_cast<size_t>(p)].rerun_for_backward) continue;
      TapeOp rerun = ops[static_cast<size_t>(p)];
      rerun.name += ".for_bwd";
      const uint32_t idx = emit_op(w, tape, rerun, Phase::bwd, policy, scope);
      on_emit(idx, true);
      place_again(w, tape, rerun, idx, scope, s, "rerun.");
    }
    if (e.all_reduce_output_grad) {
      Op reduce;
      reduce.kind = OpKind::all_reduce;
      reduce.phase = Phase::bwd;
      reduce.group = GroupKind::tp;
      reduce.layer = scope.layer;
      reduce.micro = scope.micro;
      reduce.stream = stream_for(OpKind::all_reduce, policy);
      reduce.comm_bytes = e.all_reduce_bytes;
      const auto g = descs(tape, e.outputs);
      const uint32_t ar = w.add(reduce, scope.prefix + e.name + ".grad_all_reduce", g, g);
      on_emit(ar, true);
      for (int t : e.outputs) {
        order_after_producer(w, ar, grad_producer[static_cast<size_t>(t)]);
        grad_producer[static_cast<size_t>(t)] = ar;
      }
    }
    Op op = e.op;
    op.kind = comm ? backward_kind_of_communication(e.op.kind) : e.bwd_kind;
    if (comm && e.bwd_comm_bytes >= 0) op.comm_bytes = e.bwd_comm_bytes;
    op.phase = Phase::bwd;
    op.layer = scope.layer;
    op.micro = scope.micro;
    op.stream = stream_for(op.kind, policy);
    const bool split = splits(e);
    op.flops = comm ? 0 : e.bwd_flops + (e.op.trainable_weight && !split ? e.wgrad_flops : 0);
    op.bytes_read = e.bwd_work ? e.bwd_work->bytes_read : e.op.bytes_read + e.op.bytes_written;
    op.bytes_written = e.bwd_work ? e.bwd_work->bytes_written : e.op.bytes_read;
    op.num_kernels = e.bwd_work ? e.bwd_work->num_kernels : 1;
    apply_casts(op, e.casts.grad, e.casts.weight_t, !e.casts.weight_once_per_step || scope.micro == 0);
    std::vector<TensorDesc> in_descs = descs(tape, e.outputs);  // gradients of the outputs
    for (const auto& d : descs(tape, e.bwd_needs)) in_descs.push_back(d);
    const auto out_descs = descs(tape, e.inputs);  // gradients of the inputs
    const uint32_t idx = w.add(op, scope.prefix + e.name + ".bwd", in_descs, out_descs);
    on_emit(idx, true);
    if (split) {
      // W reads the saved inputs and the output gradient and writes the weight gradient; the
      // same traffic model as the fused backward.
      DeferredWeightGrad d;
      d.op = op;
      d.op.flops = e.wgrad_flops;
      d.op.num_kernels = 1;  // the casts ran before the input gradient
      d.op.cast_bytes = 0;
      d.name = scope.prefix + e.name + ".wgrad";
      d.inputs = in_descs;
      d.after = idx;
      w_of[i] = static_cast<int64_t>(r.weight_grads.size());
      r.weight_grads.push_back(std::move(d));
    }
    if (first_bwd) {
      for (uint32_t b : scope.alloc_at_start) w.effect(idx, b, MemAction::alloc);
      first_bwd = false;
    }
    for (int t : e.bwd_needs) order_after_producer(w, idx, s.producer[static_cast<size_t>(t)]);
    for (int t : e.outputs) order_after_producer(w, idx, grad_producer[static_cast<size_t>(t)]);
    // Gradients of the inputs: allocated by their first backward consumer, accumulated by others.
    for (int t : e.inputs) {
      const auto ut = static_cast<size_t>(t);
      if (!ts[ut].requires_grad) continue;
      if (grad_buffer[ut] < 0) {
        grad_buffer[ut] = w.buffer(ts[ut].desc.bytes(), MemCategory::gradient, scope.prefix + "grad." + ts[ut].name);
        w.effect(idx, static_cast<uint32_t>(grad_buffer[ut]), MemAction::alloc);
      } else {
        order_after_producer(w, idx, grad_producer[ut]);
      }
      grad_producer[ut] = idx;
    }
    // Gradients of the outputs end here, at their producer's backward (or its deferred W).
    for (int t : e.outputs) {
      const auto ut = static_cast<size_t>(t);
      if (grad_buffer[ut] >= 0) {
        if (split) {
          r.weight_grads[static_cast<size_t>(w_of[i])].frees.push_back(static_cast<uint32_t>(grad_buffer[ut]));
        } else {
          w.effect(idx, static_cast<uint32_t>(grad_buffer[ut]), MemAction::free);
        }
        grad_buffer[ut] = -1;
      }
    }
    // Saved tensors end at their last backward reader, or with the last deferred W that reads
    // them (W ops run after every B op of the layer).
    for (int t : e.bwd_needs) {
      const auto ut = static_cast<size_t>(t);
      if (s.buffer[ut] < 0) continue;
      if (freed_by_w[ut] == static_cast<int>(i)) {
        r.weight_grads[static_cast<size_t>(w_of[i])].frees.push_back(static_cast<uint32_t>(s.buffer[ut]));
        s.buffer[ut] = -1;
      } else if (a.last_bwd_use[ut] == static_cast<int>(i) && freed_by_w[ut] < 0) {
        w.effect(idx, static_cast<uint32_t>(s.buffer[ut]), MemAction::free);
        s.buffer[ut] = -1;
      }
    }
    if (static_cast<int>(i) == last_bwd_entry) {
      // Anything still alive (kept for recompute only, recomputed but unread) ends with the layer.
      for (size_t t = 0; t < ts.size(); ++t) {
        if (s.buffer[t] >= 0 && static_cast<int>(t) != tape.output() && freed_by_w[t] < 0) {
          w.effect(idx, static_cast<uint32_t>(s.buffer[t]), MemAction::free);
          s.buffer[t] = -1;
        }
      }
      for (uint32_t b : scope.free_at_end) w.effect(idx, b, MemAction::free);
      r.last_op = idx;
    }
  }
  assert(grad_buffer[0] >= 0 || !ts[0].requires_grad);
  r.input_grad_buffer = static_cast<uint32_t>(std::max<int64_t>(grad_buffer[0], 0));
  r.input_grad_producer = static_cast<uint32_t>(std::max<int64_t>(grad_producer[0], 0));
  return r;
}

int64_t emit_weight_grads(ProgramWriter& w, const std::vector<DeferredWeightGrad>& grads) {
  int64_t last = -1;
  for (const DeferredWeightGrad& d : grads) {
    const auto idx = w.add(d.op, d.name, d.inputs, d.outputs);
    w.order_after(idx, d.after);
    for (uint32_t b : d.frees) w.effect(idx, b, MemAction::free);
    last = idx;
  }
  return last;
}

}  // namespace moesim
