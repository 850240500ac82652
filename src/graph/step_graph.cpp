// SPDX-License-Identifier: MIT
// Building a step: units and their FSDP collectives, the pipeline schedule, and the per-layer
// tapes emitted in schedule order.
#include "graph/step_graph.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <deque>
#include <map>
#include <numeric>
#include <optional>
#include <set>
#include <stdexcept>

#include "core/error.hpp"
#include "graph/dp_copies.hpp"
#include "graph/layer_ops.hpp"
#include "graph/pipeline_schedule.hpp"
#include "graph/loss_ops.hpp"
#include "graph/queues.hpp"
#include "graph/tape.hpp"
#include "model/accounting.hpp"

namespace moesim {
namespace {

// Where one model chunk of a stage sits in the pipeline: its layers, whether it holds the
// embedding (the model's first chunk) or the head and loss (its last), and the pp-group offsets
// of the stages that hold the chunks before and after it.
struct ChunkPlace {
  std::vector<int64_t> layers;
  bool first = false;
  bool last = false;
  int64_t previous = 0;
  int64_t next = 0;
};

// An overlapped forward/backward pair's ops: the forward's [begin, middle), the backward's
// [middle, end).
struct OverlappedPair {
  uint32_t begin, middle, end;
};

// DualPipe's overlapped_forward_backward: the ops of each pair merged into one issue order, each
// side running until its next compute op would wait for a communication that side issued since it
// last took over, then the other side taking over - so that one micro-batch's expert all-to-all
// (or any collective) runs under the other's compute. The backward never runs ahead of a forward
// op it depends on. Dependencies are renumbered; ops outside the pairs keep their places.
void interleave_overlapped_pairs(Program& p, const std::vector<OverlappedPair>& pairs) {
  if (pairs.empty()) return;
  const size_t n = p.ops.size();
  std::vector<uint32_t> order(n);
  std::iota(order.begin(), order.end(), 0U);
  std::vector<uint32_t> place(n, 0);
  std::vector<char> placed(n, 0);
  for (const OverlappedPair& pair : pairs) {
    std::array<uint32_t, 2> next{pair.begin, pair.middle};
    const std::array<uint32_t, 2> stop{pair.middle, pair.end};
    std::array<uint32_t, 2> took_over{pair.begin, pair.begin};
    int side = 0;
    uint32_t out = pair.begin;
    auto switch_side = [&] {
      side = 1 - side;
      took_over[static_cast<size_t>(side)] = out;
    };
    while (out < pair.end) {
      const auto s = static_cast<size_t>(side);
      if (next[s] == stop[s]) {
        switch_side();
        continue;
      }
      const uint32_t x = next[s];
      bool blocked = false, stalls = false;
      for (uint32_t d : p.deps_of(p.ops[x])) {
        if (d < pair.begin || d >= pair.end) continue;
        if (!placed[d]) {
          blocked = true;  // only a backward op can need a forward op not yet placed
        } else if (queue_of(p.ops[x]) == kComputeQueue && queue_of(p.ops[d]) != kComputeQueue &&
                   place[d] >= took_over[s]) {
          stalls = true;
        }
      }
      const auto other = static_cast<size_t>(1 - side);
      if (blocked || (stalls && next[other] < stop[other])) {
        switch_side();
        continue;
      }
      order[out] = x;
      place[x] = out;
      placed[x] = 1;
      ++out;
      ++next[s];
    }
  }
  std::vector<uint32_t> renumber(n);
  for (uint32_t k = 0; k < n; ++k) renumber[order[k]] = k;
  std::vector<Op> ops(n);
  for (uint32_t k = 0; k < n; ++k) ops[k] = p.ops[order[k]];
  p.ops = std::move(ops);
  for (uint32_t& d : p.deps) d = renumber[d];
}

// Per-rank sizes of an FSDP unit (a layer, the embedding, or the head).
struct Unit {
  double params = 0;             // non-expert parameters on this TP rank (before FSDP sharding)
  double expert_params = 0;      // this EP rank's experts on this TP rank
  double trainable = 0;          // of params
  double expert_trainable = 0;   // of expert_params
};

class StepBuilder {
 public:
  StepBuilder(const Scenario& s, const ParallelPlan& plan) : spec_(s.spec), m_(s.model), plan_(plan) {
    const auto& p = spec_.parallel;
    c_.model = &m_;
    c_.scenario = &spec_;
    c_.tokens = spec_.batch.micro_batch_size * spec_.batch.sequence_length / p.cp;
    c_.seq_len = spec_.batch.sequence_length;
    c_.tp = plan.group_size(GroupKind::tp);
    c_.cp = plan.group_size(GroupKind::cp);
    c_.ep = plan.group_size(GroupKind::ep);
    c_.etp = plan.shape().etp;
    c_.routed_tokens = plan.routed_tokens(c_.tokens);
    c_.expert_tp_group = plan.expert_tp_group();
    c_.sequence_parallel = p.tp.sequence_parallel && c_.tp > 1;
    c_.tp_comm_overlap = c_.sequence_parallel ? p.tp.comm_overlap : TpCommOverlap::none;
    c_.sp_gather_again = c_.sequence_parallel && p.tp.sp_backward_input == SpBackwardInput::gather_again;
    c_.experts_per_rank = m_.moe ? plan.experts_per_rank(m_.moe->num_experts) : 0;
    c_.act = spec_.training.precision.activations;
    c_.cp_query_heads = p.cp_kv_heads == CpKvHeads::query;
    c_.cp_grad = p.cp_grad_format.value_or(c_.act);
    c_.compute = spec_.training.precision.compute;
    c_.attention = attention_dtype(spec_.training.precision);
    c_.unquantized = unquantized_dtype(spec_.training.precision);
    c_.train_base = spec_.training.mode != TrainingMode::lora;
    if (spec_.training.lora) {
      c_.lora_targets = spec_.training.lora->targets;
      c_.lora_rank = spec_.training.lora->rank;
    }
    c_.fused = spec_.fused_ops;
    c_.local_first = spec_.overlap.moe_local_first;
    c_.shared_expert_overlap = spec_.overlap.moe_shared_expert_overlap;
    c_.dispatch_chunks = spec_.overlap.moe_dispatch_chunks;
    c_.attention_dropout = spec_.training.attention_dropout;
    c_.hidden_dropout = spec_.training.hidden_dropout;
    num_micro_ = micro_batches_per_step(spec_);
    zero_stage_ = p.fsdp.zero_stage;
    offload_ = p.fsdp.offload;
    sync_every_micro_ = resolved_gradient_sync(p.fsdp, p.pp.stages) == GradientSync::every_micro_batch;
    zero_bubble_ = p.pp.schedule == PipelineSchedule::zero_bubble_h1;
    dualpipe_ = p.pp.schedule == PipelineSchedule::dualpipe && p.pp.stages > 1;
    overlap_forward_backward_ = p.pp.overlap_forward_backward;
    // FSDP2 without resharding after forward under a pipeline schedule: PyTorch's pipelining turns
    // off resharding after every backward but each unit's last one, so the first forward's gather
    // serves every micro-batch in flight and the copy lives until the last backward.
    gather_once_per_step_ = zero_stage_ >= 3 && !p.fsdp.reshard_after_forward && p.pp.stages > 1;
  }

  int64_t num_micro() const { return num_micro_; }
  int64_t tokens() const { return c_.tokens; }

  // The model chunks `stage` holds, in its schedule's chunk order: its virtual chunks (model chunk
  // g = v * stages + stage), or DualPipe's stage and mirror stage (stages - 1 - stage).
  std::vector<ChunkPlace> chunk_places(int64_t stage) const {
    const auto& pp = spec_.parallel.pp;
    const std::vector<int64_t> counts = chunk_layer_counts(pp, m_.num_layers);
    const auto chunks = static_cast<int64_t>(counts.size());
    std::vector<int64_t> first_layer(counts.size() + 1, 1);
    for (size_t c = 0; c < counts.size(); ++c) first_layer[c + 1] = first_layer[c] + counts[c];
    auto place = [&](int64_t g, int64_t previous, int64_t next) {
      ChunkPlace c{{}, g == 0, g == chunks - 1, previous, next};
      for (int64_t l = first_layer[static_cast<size_t>(g)]; l < first_layer[static_cast<size_t>(g) + 1]; ++l) c.layers.push_back(l);
      return c;
    };
    std::vector<ChunkPlace> out;
    if (dualpipe_) {
      out.push_back(place(stage, -1, 1));                   // direction 0: micro-batches enter at rank 0
      out.push_back(place(pp.stages - 1 - stage, 1, -1));  // direction 1: they enter at rank p-1
      return out;
    }
    for (int64_t v = 0; v < pp.virtual_stages; ++v) {
      const int64_t g = v * pp.stages + stage;
      out.push_back(place(g, g > 0 ? (g - 1) % pp.stages - stage : 0, g + 1 < chunks ? (g + 1) % pp.stages - stage : 0));
    }
    return out;
  }

  // The FSDP units of `stage`: the layers of its chunks, the embedding with the model's first
  // chunk, the head with its last. Without adapters, LoRA adapters are left out (no layer tape is
  // built).
  void collect_units(int64_t stage, bool with_adapters) {
    units_.clear();
    for (const ChunkPlace& c : chunk_places(stage)) {
      if (c.first) units_[0] = embedding_unit();
      if (c.last) units_[m_.num_layers + 1] = head_unit();
      for (int64_t l : c.layers) units_[l] = layer_unit(l, with_adapters);
    }
  }

  PersistentMemory persistent_state(int64_t stage, bool with_adapters) {
    collect_units(stage, with_adapters);
    Program p;
    persistent(p);
    return p.persistent;
  }

  Program build(int64_t stage) {
    Program program;
    program.stage = stage;
    stage_ = stage;
    ProgramWriter w(program);
    const auto& pp = spec_.parallel.pp;
    const std::vector<ChunkPlace> places = chunk_places(stage);
    states_.clear();
    held_.clear();
    held_for_step_.clear();
    loss_.clear();
    first_fwd_op_.clear();
    first_bwd_op_.clear();
    last_reduce_.clear();
    step_grads_.clear();
    step_grads_held_.clear();
    grads_done_.clear();
    accumulated_.clear();
    held_back_.clear();
    deferred_reductions_.clear();
    collect_units(stage, true);
    persistent(program);

    const std::vector<Action> actions = dualpipe_
                                            ? dualpipe_schedule(stage, pp.stages, num_micro_, overlap_forward_backward_)
                                            : pipeline_schedule(stage, pp.stages, pp.virtual_stages, num_micro_, zero_bubble_);
    std::vector<OverlappedPair> pairs;
    int64_t pair_start = -1;  // first op of an overlapped forward whose backward comes next
    for (const Action& a : actions) {
      const ChunkPlace& place = places[static_cast<size_t>(a.chunk)];
      const auto here = static_cast<int64_t>(program.ops.size());
      pass_start_ = here;
      switch (a.pass) {
        case Pass::forward:
          if (a.overlapped) pair_start = here;
          forward(w, a.micro, place);
          break;
        case Pass::backward:
          defer_weights_ = a.defer_weights;
          // The backward of an overlapped pair is posted with its forward, not after it.
          schedule_point_limit_ = pair_start >= 0 ? pair_start : -1;
          backward(w, a.micro, place);
          schedule_point_limit_ = -1;
          if (pair_start >= 0) {
            pairs.push_back({static_cast<uint32_t>(pair_start), static_cast<uint32_t>(here),
                             static_cast<uint32_t>(program.ops.size())});
          }
          pair_start = -1;
          break;
        case Pass::weight: weight_gradients(w); break;
      }
      // One action written: room for all of them, at twice its size (a backward writes about
      // twice a forward's ops), before the arrays grow by doubling.
      if (&a == &actions.front()) program.reserve_scaled(2.0 * static_cast<double>(actions.size()));
    }
    reduce_deferred(w);
    optimizer(w);
    interleave_overlapped_pairs(program, pairs);
    return program;
  }

 private:
  TapePolicy policy_for(int64_t layer) const {
    TapePolicy p;
    p.comm_on_compute_stream = !spec_.overlap.comm_compute;
    p.split_weight_grad = defer_weights_;
    if (layer >= 1 && layer <= m_.num_layers) {
      if (spec_.recompute.layers.contains(layer)) p.recompute = spec_.recompute.policy;
      if (spec_.swap.enabled && spec_.swap.layers.contains(layer)) p.swap = spec_.swap.ops;
    }
    return p;
  }

  Stream comm_stream() const { return spec_.overlap.comm_compute ? Stream::comm : Stream::compute; }

  Unit layer_unit(int64_t layer, bool with_adapters) const {
    const LayerParams lp = layer_params(m_, layer);
    Unit u;
    u.params = static_cast<double>(lp.non_expert) / static_cast<double>(c_.tp);
    u.expert_params = static_cast<double>(lp.expert) / static_cast<double>(c_.ep * c_.etp);
    if (c_.train_base) {
      u.trainable = u.params;
      u.expert_trainable = u.expert_params;
      return u;
    }
    if (!with_adapters) return u;
    // LoRA: the adapters of this layer, as the tape builds them.
    const LayerTape tape = build_layer_tape(c_, layer);
    for (const auto& op : tape.ops()) {
      if (op.op.kind != OpKind::lora_gemm) continue;
      const double p = elements(op.op.k, op.op.n);
      if (op.op.num_groups > 0) {
        u.expert_trainable += p * op.op.num_groups;
      } else {
        u.trainable += p;
      }
    }
    u.params += u.trainable;
    u.expert_params += u.expert_trainable;
    return u;
  }

  Unit embedding_unit() const {
    Unit u;
    u.params = elements(m_.vocab_size, m_.hidden_size) / static_cast<double>(c_.tp);  // vocabulary-parallel
    if (m_.position == PositionKind::learned) u.params += elements(m_.max_position_embeddings, m_.hidden_size);
    u.trainable = c_.train_base ? u.params : 0;
    return u;
  }

  Unit head_unit() const {
    Unit u;
    const double head = m_.tie_word_embeddings ? 0.0 : elements(m_.vocab_size, m_.hidden_size) / static_cast<double>(c_.tp);
    u.params = head + static_cast<double>(m_.hidden_size);
    if (c_.train_base) {
      u.trainable = u.params;
    } else if (c_.lora_on(LoraTarget::lm_head)) {
      u.trainable = elements(c_.lora_rank, m_.hidden_size + m_.vocab_size / c_.tp);
      u.params += u.trainable;
    }
    return u;
  }

  // What a rank keeps for a part of the weights sharded over `shards` ranks, by ZeRO stage:
  // optimizer states and fp32 master weights from stage 1, gradients from stage 2, parameters at
  // stage 3 (FSDP2, which keeps no low-precision copy of trainable weights: it casts on gather).
  struct ShardDivisors {
    double states, grads, params;
  };
  ShardDivisors divisors(int64_t shards) const {
    const auto n = static_cast<double>(shards);
    return {zero_stage_ >= 1 ? n : 1.0, zero_stage_ >= 2 ? n : 1.0, zero_stage_ >= 3 ? n : 1.0};
  }

  // CPU offload (parallel.fsdp.offload) moves, of the state below: master weights and optimizer
  // states always; gradients where they are sharded into a buffer of their own first (ZeRO-2/3,
  // grads_on_host); the stored parameters with offload parameters (FSDP2 CPUOffloadPolicy). The
  // host copy holds exactly the bytes HBM would have held (same shards, same formats).
  void persistent(Program& p) const {
    const auto& prec = spec_.training.precision;
    const double states = spec_.training.optimizer.kind == OptimizerKind::adamw ? 2.0 : 1.0;
    const bool offload = offload_ != OffloadKind::none;
    for (const auto& [layer, u] : units_) {
      for (const Part& part : parts(u)) {
        const ShardDivisors d = divisors(plan_.group_size(part.shard_group));
        // Stage 3 holds low-precision copies of frozen weights only; below it, of all weights.
        // ZeRO-3 under ZeRO-Offload keeps a low-precision shard of the trainable weights in HBM too,
        // to gather from (DeepSpeed's fp16 partition), the fp32 master being on the host.
        const double low_precision =
            zero_stage_ >= 3 && offload_ != OffloadKind::optimizer ? part.params - part.trainable : part.params;
        const double params = low_precision / d.params * dtype_bytes(prec.params);
        const double master = part.trainable / d.states * dtype_bytes(prec.master_params);
        const double grads = part.trainable / d.grads * dtype_bytes(prec.grads);
        const double moments = states * part.trainable / d.states * dtype_bytes(prec.optimizer_states);
        (offload_ == OffloadKind::parameters ? p.persistent.host_params : p.persistent.params) += params;
        (offload ? p.persistent.host_master_params : p.persistent.master_params) += master;
        if (grads_on_host(part)) {
          p.persistent.host_grads += grads;
        } else if (!step_grads()) {
          p.persistent.grads += grads;
        }
        (offload ? p.persistent.host_optimizer_states : p.persistent.optimizer_states) += moments;
      }
    }
  }

  // A host copy: host-to-device (swap_in) or device-to-host (swap_out). With a group, on that
  // group's communication queue, in order with its collectives (queues.hpp); else the copy queue.
  uint32_t host_copy(ProgramWriter& w, OpKind kind, int64_t layer, int32_t micro, Phase phase, double bytes,
                     const std::string& name, std::optional<GroupKind> group = std::nullopt) {
    Op op;
    op.kind = kind;
    op.phase = phase;
    op.stream = group ? comm_stream() : Stream::copy;
    if (group) op.group = *group;
    op.layer = static_cast<int32_t>(layer);
    op.micro = micro;
    (kind == OpKind::swap_out ? op.bytes_read : op.bytes_written) = bytes;
    op.comm_bytes = bytes;
    return w.add(op, name);
  }

  // The trainable parameters this rank's optimizer updates for a unit.
  double optimizer_share(const Unit& u) const {
    double out = 0;
    for (const Part& part : parts(u)) out += part.trainable / divisors(plan_.group_size(part.shard_group)).states;
    return out;
  }

  // The formats FSDP2's copies read and write (dp_copies.hpp).
  DpFormats formats() const {
    const auto& prec = spec_.training.precision;
    return DpFormats{prec.params, prec.master_params, prec.grad_reduce, prec.grads};
  }

  // One of FSDP2's copies (dp_copies.hpp): on the compute queue, or with a group on that group's
  // queue (FSDP2's all-gather and reduce-scatter streams). Its tensors are the bytes it writes,
  // in 2-byte elements, so that the executor runs a copy of that size.
  uint32_t dp_copy(ProgramWriter& w, OpKind kind, int64_t layer, int32_t micro, Phase phase, const CopyBytes& bytes,
                   std::optional<GroupKind> group, const std::string& name) {
    Op op;
    op.kind = kind;
    op.phase = phase;
    op.stream = group ? comm_stream() : Stream::compute;
    if (group) op.group = *group;
    op.layer = static_cast<int32_t>(layer);
    op.micro = micro;
    op.bytes_read = bytes.read;
    op.bytes_written = bytes.written;
    // The formats of the copy's parts are kept only as bytes: its tensors are the bytes it reads
    // and writes, in 2-byte elements (what the executor moves, exec_kernels::move_bytes).
    const auto elements = [](double b) { return std::max<int64_t>(1, static_cast<int64_t>(std::llround(b / 2.0))); };
    TensorDesc in, out;
    in.shape[0] = elements(bytes.read);
    out.shape[0] = elements(bytes.written);
    const std::array<TensorDesc, 1> reads{in}, writes{out};
    return w.add(op, name, reads, writes);
  }

  // An FSDP2 copy-out: the all-gather's flat output split into the unit's parameters, on the
  // compute stream once the unit is reached.
  struct CopyOut {
    int64_t layer;
    int32_t micro;
    Phase phase;
    CopyBytes bytes;
    uint32_t all_gather;
    uint32_t flat;
    double param_bytes;
    std::string name;
    std::string buffer_name;
  };
  void copy_out(ProgramWriter& w, const CopyOut& o, std::vector<uint32_t>& ops, std::vector<uint32_t>& buffers) {
    const uint32_t c = dp_copy(w, OpKind::dp_copy, o.layer, o.micro, o.phase, o.bytes, std::nullopt, o.name);
    w.order_after(c, o.all_gather);
    const uint32_t b = w.buffer(o.param_bytes, MemCategory::gathered_params, o.buffer_name);
    w.effect(c, b, MemAction::alloc);
    w.effect(c, o.flat, MemAction::free);
    ops.push_back(c);
    buffers.push_back(b);
  }

  // FSDP2 all-gathers of a unit, each after op `after`; `ops` gets what the unit's first op waits
  // for, `buffers` the gathered buffers they fill. `allocate`: into a transient buffer (FSDP2), else
  // into the resident full copy (ZeRO 1-2). FSDP2 also copies around each all-gather
  // (dp_copies.hpp): the cast and copy-in on the all-gather's queue before it, the copy-out on the
  // compute queue after it, where the unit's pre-forward (or pre-backward) hook waits for the
  // gather; over a group of one rank there is no all-gather, and the cast and copy fill the
  // unsharded parameters on the compute queue. With `later`, the copy-outs are left there for the
  // unit to emit when it is reached (a gather prefetched in the backward).
  void gather(ProgramWriter& w, int64_t layer, int32_t micro, Phase phase, std::vector<uint32_t>& ops,
              std::vector<uint32_t>& buffers, int64_t after, bool allocate, std::vector<CopyOut>* later = nullptr) {
    const Unit& u = units_.at(layer);
    const auto& prec = spec_.training.precision;
    const double bytes = dtype_bytes(prec.params);
    auto one = [&](GroupKind group, double params, double trainable, const char* what) {
      const int64_t shards = plan_.group_size(group);
      // Offload parameters (stage 3): the shard comes from host memory first, in its stored formats
      // (frozen weights low precision, trainable ones the fp32 master: FSDP2 copies the sharded
      // parameter to the device, then casts it in the all-gather's copy-in), prefetched with the
      // gather; the gather frees it. Unsharded, the copy is the unit's weights.
      const bool from_host = offload_ == OffloadKind::parameters && allocate;
      if (params <= 0) return;
      const GatherCopies copies = allocate ? fsdp2_gather_copies(DpPart{params, trainable, shards}, formats()) : GatherCopies{};
      const std::string prefix = unit_name(layer) + ".";
      if (shards == 1 && !from_host) {
        if (copies.copy_in.empty()) return;
        const uint32_t c = dp_copy(w, OpKind::dp_copy, layer, micro, phase, copies.copy_in, std::nullopt,
                                   prefix + "fsdp_copy_in." + what);
        const uint32_t b = w.buffer(params * bytes, MemCategory::gathered_params, prefix + "gathered." + what);
        w.effect(c, b, MemAction::alloc);
        ops.push_back(c);
        buffers.push_back(b);
        return;
      }
      int64_t h2d = -1;
      uint32_t shard = 0;
      if (from_host) {
        const auto n = static_cast<double>(shards);
        const double shard_bytes =
            (params - trainable) / n * dtype_bytes(prec.params) + trainable / n * dtype_bytes(prec.master_params);
        h2d = host_copy(w, OpKind::swap_in, layer, micro, phase, shard_bytes, prefix + "offload_h2d." + what, group);
        shard = w.buffer(shard_bytes, MemCategory::gathered_params, prefix + "offload_shard." + what);
        w.effect(static_cast<uint32_t>(h2d), shard, MemAction::alloc);
        if (after >= 0) w.order_after(static_cast<uint32_t>(h2d), static_cast<uint32_t>(after));
        if (shards == 1) {
          ops.push_back(static_cast<uint32_t>(h2d));
          buffers.push_back(shard);
          return;
        }
      }
      int64_t copy_in = -1;
      if (!copies.copy_in.empty()) {
        copy_in = dp_copy(w, OpKind::dp_copy, layer, micro, phase, copies.copy_in, group, prefix + "fsdp_copy_in." + what);
        if (after >= 0) w.order_after(static_cast<uint32_t>(copy_in), static_cast<uint32_t>(after));
        if (h2d >= 0) w.order_after(static_cast<uint32_t>(copy_in), static_cast<uint32_t>(h2d));
      }
      Op op;
      op.kind = OpKind::all_gather;
      op.phase = phase;
      op.stream = comm_stream();
      op.group = group;
      op.layer = static_cast<int32_t>(layer);
      op.micro = micro;
      op.comm_bytes = params * bytes;
      const uint32_t i = w.add(op, prefix + "fsdp_all_gather." + what);
      if (after >= 0) w.order_after(i, static_cast<uint32_t>(after));
      if (h2d >= 0) w.order_after(i, static_cast<uint32_t>(h2d));
      if (copy_in >= 0) w.order_after(i, static_cast<uint32_t>(copy_in));
      if (!allocate) {
        ops.push_back(i);
        return;
      }
      if (copies.copy_out.empty()) {
        const uint32_t b = w.buffer(params * bytes, MemCategory::gathered_params, prefix + "gathered." + what);
        w.effect(i, b, MemAction::alloc);
        if (h2d >= 0) w.effect(i, shard, MemAction::free);
        ops.push_back(i);
        buffers.push_back(b);
        return;
      }
      // The all-gather writes one flat buffer; the copy-out splits it into the parameters and
      // frees it (FSDP2 frees the all-gather output once copied out).
      const uint32_t flat = w.buffer(params * bytes, MemCategory::gathered_params, prefix + "all_gather_output." + what);
      w.effect(i, flat, MemAction::alloc);
      if (h2d >= 0) w.effect(i, shard, MemAction::free);
      CopyOut out{layer, micro, phase, copies.copy_out, i, flat, params * bytes, prefix + "fsdp_copy_out." + what,
                  prefix + "gathered." + what};
      if (later != nullptr) {
        later->push_back(std::move(out));
      } else {
        copy_out(w, out, ops, buffers);
      }
    };
    one(GroupKind::fsdp, u.params, u.trainable, "params");
    one(GroupKind::edp, u.expert_params, u.expert_trainable, "experts");
  }

  // The two parts of a unit's gradients: non-expert weights sharded over the fsdp group, expert
  // weights over the edp group.
  struct Part {
    GroupKind shard_group;
    double params;
    double trainable;
    const char* name;
  };
  std::array<Part, 2> parts(const Unit& u) const {
    return {Part{GroupKind::fsdp, u.params, u.trainable, "params"},
            Part{GroupKind::edp, u.expert_params, u.expert_trainable, "experts"}};
  }
  // A part's gradients need a collective unless its shard group and the replicate group are trivial
  // (then the unsharded gradients are the sharded ones, accumulated in place).
  bool needs_reduction(const Part& part) const {
    return part.trainable > 0 &&
           (plan_.group_size(part.shard_group) > 1 || plan_.group_size(GroupKind::replicate) > 1);
  }
  // Whether a part's full gradients live in a buffer of their own until they are reduce-scattered
  // (ZeRO-2 and FSDP2); below stage 2 the persistent gradients are full and reduced in place.
  bool has_unsharded_buffer(const Part& part) const {
    return needs_reduction(part) && zero_stage_ >= 2 && plan_.group_size(part.shard_group) > 1;
  }

  // training.gradient_memory per_step: a part's gradients (the bytes persistent() would hold) take
  // HBM from where the step first writes them to the unit's optimizer update. Written by the first
  // reduction of the step where the full gradients wait in a buffer of their own (ZeRO-2, FSDP2:
  // the shard is the reduction's output), else by the unit's first backward (param.grad).
  bool step_grads() const { return spec_.training.gradient_memory == GradientMemory::per_step; }
  std::optional<uint32_t> new_step_grads(ProgramWriter& w, int64_t layer, const Part& part) {
    if (!step_grads() || part.trainable <= 0 || grads_on_host(part)) return std::nullopt;
    if (!step_grads_held_.insert({layer, part.name}).second) return std::nullopt;
    const double bytes = part.trainable / divisors(plan_.group_size(part.shard_group)).grads *
                         dtype_bytes(spec_.training.precision.grads);
    const uint32_t b = w.buffer(bytes, MemCategory::step_grads, unit_name(layer) + ".step_grads." + part.name);
    step_grads_[layer].push_back(b);
    return b;
  }
  // The buffers of the unit's backward start: its parts without a buffer of unsharded gradients.
  void step_grads_at_backward(ProgramWriter& w, int64_t layer, std::vector<uint32_t>& alloc) {
    for (const Part& part : parts(units_.at(layer))) {
      if (has_unsharded_buffer(part)) continue;
      if (auto b = new_step_grads(w, layer, part)) alloc.push_back(*b);
    }
  }
  // The shard a reduction just wrote (`writer`, the last op added) of a part with unsharded gradients.
  void step_grads_at_reduction(ProgramWriter& w, int64_t layer, const Part& part, uint32_t writer) {
    if (!has_unsharded_buffer(part)) return;
    if (auto b = new_step_grads(w, layer, part)) w.effect(writer, *b, MemAction::alloc);
  }
  // Under CPU offload, a part's sharded gradients live in host memory when the reduction writes
  // them to a shard buffer of their own (ZeRO-2/3 with a shard group); otherwise (ZeRO-1, or a
  // part nobody shards) they stay in HBM, where the backward accumulates them, and only a copy of
  // the reduced shard goes to the host.
  bool grads_on_host(const Part& part) const { return offload_ != OffloadKind::none && has_unsharded_buffer(part); }
  // Gradients are reduced in this micro-batch's backward.
  bool syncs(int64_t micro) const { return sync_every_micro_ || last_micro(micro); }
  // The first and the last micro-batch through a unit: of the step, or of its DualPipe direction.
  bool first_micro(int64_t micro) const { return micro == 0 || (dualpipe_ && micro == num_micro_ / 2); }
  bool last_micro(int64_t micro) const { return micro == num_micro_ - 1 || (dualpipe_ && micro == num_micro_ / 2 - 1); }

  // Unsharded gradient buffers a unit's backward accumulates into, in the order reduce() releases
  // them: one set per micro-batch when gradients sync every micro-batch, else one set held from
  // the first micro-batch's backward to the last one's reduction.
  std::vector<uint32_t> grad_buffers(ProgramWriter& w, int64_t layer, int64_t micro, std::vector<uint32_t>& alloc) {
    if (!sync_every_micro_ && !first_micro(micro)) return accumulated_.at(layer);
    const double bytes = dtype_bytes(spec_.training.precision.grad_reduce);
    std::vector<uint32_t> out;
    for (const Part& part : parts(units_.at(layer))) {
      if (!has_unsharded_buffer(part)) continue;
      out.push_back(w.buffer(part.trainable * bytes, MemCategory::unsharded_grads,
                             unit_name(layer) + ".unsharded_grads." + part.name));
    }
    alloc = out;
    if (!sync_every_micro_) accumulated_[layer] = out;
    return out;
  }

  // How micro-batch `micro`'s backward treats a unit's gradients (dp_copies.hpp).
  GradStep grad_step(int64_t micro, bool reduces) const {
    return GradStep{reduces, first_micro(micro), reduces && !sync_every_micro_ && !first_micro(micro)};
  }

  // A micro-batch that does not reduce (gradient_sync last_micro_batch): FSDP2 accumulates its
  // unsharded gradients after the unit's backward (dp_copies.hpp).
  void accumulate_unsynced(ProgramWriter& w, int64_t layer, int32_t micro, uint32_t after) {
    if (zero_stage_ < 3) return;
    for (const Part& part : parts(units_.at(layer))) {
      const ReduceCopies c = fsdp2_reduce_copies(DpPart{part.params, part.trainable, plan_.group_size(part.shard_group)},
                                                 formats(), grad_step(micro, false));
      if (c.unsharded_accumulate.empty()) continue;
      const uint32_t op = dp_copy(w, OpKind::grad_accumulate, layer, micro, Phase::bwd, c.unsharded_accumulate,
                                  std::nullopt, unit_name(layer) + ".fsdp_accumulate_unsharded." + part.name);
      w.order_after(op, after);
    }
  }

  // Gradient reduction of a unit after its backward: per part, reduce-scatter over its shard
  // group, then all-reduce over replicate groups (HSDP), or all-reduce alone (DDP). The parts run
  // on the queues of their groups, each after the backward. Returns each part's last op.
  std::vector<uint32_t> reduce(ProgramWriter& w, int64_t layer, int32_t micro, uint32_t after,
                               const std::vector<uint32_t>& buffers) {
    const double bytes = dtype_bytes(spec_.training.precision.grad_reduce);
    std::vector<uint32_t> lasts;
    size_t next_buffer = 0;
    auto one = [&](OpKind kind, GroupKind group, double elements, const std::string& what, uint32_t dep, bool frees) {
      Op op;
      op.kind = kind;
      op.phase = Phase::bwd;
      op.stream = comm_stream();
      op.group = group;
      op.layer = static_cast<int32_t>(layer);
      op.micro = micro;
      op.comm_bytes = elements * bytes;
      const uint32_t i = w.add(op, unit_name(layer) + "." + what);
      w.order_after(i, dep);
      if (frees) w.effect(i, buffers[next_buffer++], MemAction::free);
      return i;
    };
    const int64_t rep = plan_.group_size(GroupKind::replicate);
    const bool offload = offload_ != OffloadKind::none;
    // CPU offload: the reduced gradients (this rank's shard, in the reduction's format) go to host
    // memory once reduced, after each reduction (FSDP2's post-reduce copy to the CPU, ZeRO-Offload's
    // gradient offload); a shard buffer, when the gradients live on the host, is freed by the copy.
    auto to_host = [&](const Part& part, double elements, uint32_t dep, int64_t shard_buffer) {
      const Op& reduction = w.program().ops[dep];
      const GroupKind group = is_collective(reduction.kind) ? reduction.group : part.shard_group;
      const uint32_t c = host_copy(w, OpKind::swap_out, layer, micro, Phase::bwd, elements * bytes,
                                   unit_name(layer) + ".offload_d2h." + part.name, group);
      w.order_after(c, dep);
      if (shard_buffer >= 0) w.effect(c, static_cast<uint32_t>(shard_buffer), MemAction::free);
      return c;
    };
    for (const Part& part : parts(units_.at(layer))) {
      const int64_t shards = plan_.group_size(part.shard_group);
      const std::string prefix = unit_name(layer) + ".";
      // FSDP2's copies around the reduction (dp_copies.hpp): the accumulation of earlier
      // micro-batches' gradients and the reduce-scatter's copy-in on the compute queue before it.
      const ReduceCopies copies = zero_stage_ >= 3 ? fsdp2_reduce_copies(DpPart{part.params, part.trainable, shards},
                                                                         formats(), grad_step(micro, true))
                                                   : ReduceCopies{};
      uint32_t ready = after;
      auto chain = [&](OpKind kind, const CopyBytes& b, const char* what) {
        if (b.empty()) return;
        const uint32_t c = dp_copy(w, kind, layer, micro, Phase::bwd, b, std::nullopt, prefix + what + "." + part.name);
        w.order_after(c, ready);
        ready = c;
      };
      chain(OpKind::grad_accumulate, copies.unsharded_accumulate, "fsdp_accumulate_unsharded");
      chain(OpKind::dp_copy, copies.copy_in, "fsdp_reduce_copy_in");
      if (!needs_reduction(part)) {
        // Nothing to reduce: the gradients accumulate in HBM and go to the host once complete.
        // FSDP2 over one rank copies the input to the output and updates the shard itself.
        chain(OpKind::dp_copy, copies.single_rank_copy, "fsdp_reduce_copy");
        chain(OpKind::grad_accumulate, copies.sharded_update, "fsdp_accumulate_shard");
        if (offload && part.trainable > 0 && last_micro(micro)) {
          lasts.push_back(to_host(part, part.trainable, ready, -1));
        } else if (ready != after) {
          lasts.push_back(ready);
        }
        continue;
      }
      const bool frees = has_unsharded_buffer(part);
      uint32_t last = 0;
      int64_t shard_buffer = -1;
      if (shards > 1 && zero_stage_ >= 1) {
        last = one(OpKind::reduce_scatter, part.shard_group, part.trainable, std::string("fsdp_reduce_scatter.") + part.name,
                   ready, frees);
        if (grads_on_host(part)) {
          shard_buffer = w.buffer(part.trainable / static_cast<double>(shards) * bytes, MemCategory::gradient,
                                  unit_name(layer) + ".offload_grad_shard." + part.name);
          w.effect(last, static_cast<uint32_t>(shard_buffer), MemAction::alloc);
        }
        if (rep > 1) {
          last = one(OpKind::all_reduce, GroupKind::replicate, part.trainable / static_cast<double>(shards),
                     std::string("hsdp_all_reduce.") + part.name, last, false);
        }
      } else {
        // DDP: all-reduce over the shard group, then across replicas (FSDP2 over a shard group of
        // one rank: its copy in place of the reduce-scatter, then the all-reduce).
        chain(OpKind::dp_copy, copies.single_rank_copy, "fsdp_reduce_copy");
        last = ready;
        if (shards > 1) {
          last = one(OpKind::all_reduce, part.shard_group, part.trainable, std::string("ddp_all_reduce.") + part.name, last,
                     false);
        }
        if (rep > 1) {
          last = one(OpKind::all_reduce, GroupKind::replicate, part.trainable,
                     std::string(shards > 1 ? "hsdp_all_reduce." : "ddp_all_reduce.") + part.name, last, false);
        }
      }
      if (!copies.sharded_update.empty()) {
        // On the reduction's stream, after it (FSDP2's post-reduce work).
        const Op& reduction = w.program().ops[last];
        const std::optional<GroupKind> queue =
            is_collective(reduction.kind) ? std::optional<GroupKind>(reduction.group) : std::nullopt;
        const uint32_t c = dp_copy(w, OpKind::grad_accumulate, layer, micro, Phase::bwd, copies.sharded_update, queue,
                                   prefix + "fsdp_accumulate_shard." + part.name);
        w.order_after(c, last);
        last = c;
      }
      step_grads_at_reduction(w, layer, part, last);
      if (offload) {
        const bool scattered = shards > 1 && zero_stage_ >= 1;
        last = to_host(part, part.trainable / static_cast<double>(scattered ? shards : 1), last, shard_buffer);
      }
      lasts.push_back(last);
    }
    return lasts;
  }

  std::string unit_name(int64_t layer) const {
    if (layer == 0) return "embedding";
    if (layer == m_.num_layers + 1) return "head";
    return "layer" + std::to_string(layer);
  }

  EmitScope scope(int64_t layer, int64_t micro) const {
    EmitScope sc;
    sc.layer = static_cast<int32_t>(layer);
    sc.micro = static_cast<int32_t>(micro);
    sc.prefix = unit_name(layer) + ".";
    return sc;
  }

  // Point-to-point between pipeline stages: `offset` in the pp group.
  uint32_t p2p(ProgramWriter& w, OpKind kind, int64_t offset, int64_t micro, int64_t layer, Phase phase, double bytes,
               const std::string& name) {
    Op op;
    op.kind = kind;
    op.phase = phase;
    op.stream = comm_stream();
    op.group = GroupKind::pp;
    op.peer_offset = static_cast<int32_t>(offset);
    op.layer = static_cast<int32_t>(layer);
    op.micro = static_cast<int32_t>(micro);
    op.comm_bytes = bytes;
    return w.add(op, name);
  }

  // A pipeline receive is posted where the schedule reaches it, after the compute before it (as
  // Megatron posts it together with the previous send), not as soon as its queue is free: its
  // buffer is allocated then, and a stage cannot take in activations ahead of its schedule.
  void post_at_schedule_point(ProgramWriter& w, uint32_t recv) const {
    const int64_t before = last_compute(w);
    if (before >= 0 && static_cast<uint32_t>(before) < recv) w.order_after(recv, static_cast<uint32_t>(before));
  }

  struct Boundary {  // the residual stream between layers
    uint32_t buffer;
    int64_t producer;
  };

  // Sends a boundary tensor to another stage once it is produced; the local copy ends with the send.
  void send_away(ProgramWriter& w, int64_t offset, int64_t micro, int64_t layer, Phase phase, double bytes,
                 const std::string& name, Boundary what) {
    const uint32_t s = p2p(w, OpKind::send, offset, micro, layer, phase, bytes, name);
    w.order_after(s, static_cast<uint32_t>(what.producer));
    w.effect(s, what.buffer, MemAction::free);
  }

  void forward(ProgramWriter& w, int64_t micro, const ChunkPlace& place) {
    const double hidden_bytes = elements(c_.sp_tokens(), m_.hidden_size) * dtype_bytes(c_.act);
    const int32_t mi = static_cast<int32_t>(micro);
    const auto& layers = place.layers;
    Boundary h{0, -1};
    if (place.first) {
      const int64_t id_rows = c_.tp > 1 ? c_.tokens : c_.sp_tokens();  // every TP rank looks up all tokens
      const uint32_t ids = w.buffer(static_cast<double>(id_rows) * 4.0, MemCategory::activation, "token_ids");
      h = run_unit_forward(w, 0, micro, build_embedding_tape(c_), Boundary{ids, -1}, {ids});
    } else {
      const uint32_t r = p2p(w, OpKind::recv, place.previous, micro, layers.empty() ? m_.num_layers + 1 : layers.front(),
                             Phase::fwd, hidden_bytes, "pp_recv.activation");
      post_at_schedule_point(w, r);
      const uint32_t b = w.buffer(hidden_bytes, MemCategory::activation, "pp.activation_in");
      w.effect(r, b, MemAction::alloc);
      h = Boundary{b, r};
    }
    for (int64_t l : layers) h = run_unit_forward(w, l, micro, build_layer_tape(c_, l), h, {});
    if (place.last) {
      const int64_t head = m_.num_layers + 1;
      h = run_unit_forward(w, head, micro, build_final_norm_tape(c_), h, {});
      loss_[micro] = emit_loss_forward(w, c_, policy_for(head), mi, h.buffer, static_cast<uint32_t>(h.producer));
    } else {
      send_away(w, place.next, micro, layers.empty() ? 0 : layers.back(), Phase::fwd, hidden_bytes, "pp_send.activation", h);
    }
  }

  Boundary run_unit_forward(ProgramWriter& w, int64_t layer, int64_t micro, const LayerTape& tape, Boundary in,
                            std::vector<uint32_t> alloc_first) {
    EmitScope sc = scope(layer, micro);
    std::vector<uint32_t> gathered;
    const int64_t anchor = prefetch_anchor_forward(w, layer);
    if (gather_once_per_step_) {
      // The compute queue's order makes the later micro-batches wait for the first one's gather.
      if (!held_for_step_.contains(layer)) {
        gather(w, layer, static_cast<int32_t>(micro), Phase::fwd, sc.first_op_deps, gathered, anchor, true);
        held_for_step_[layer] = gathered;
      }
    } else if (zero_stage_ >= 3) {
      gather(w, layer, static_cast<int32_t>(micro), Phase::fwd, sc.first_op_deps, gathered, anchor, true);
      if (spec_.parallel.fsdp.reshard_after_forward) {
        sc.free_at_end = gathered;
      } else {
        held_[{micro, layer}] = gathered;
      }
    } else if (zero_stage_ >= 1 && first_micro(micro) && spec_.parallel.fsdp.overlap_param_gather) {
      // The distributed optimizer's parameter all-gather, into the persistent full copy:
      // overlapped with the next step's first forward (Megatron's overlap_param_gather), which is
      // this step's first forward in steady state. Every unit's gather is issued at the step's
      // start, back to back, each unit's first forward waiting for its own: with
      // align_param_gather (Megatron-Core's default) every pipeline stage launches its gathers
      // at once rather than as its first forward reaches them. Not overlapped, the gathers
      // follow the optimizer step (gather_after_optimizer).
      gather(w, layer, static_cast<int32_t>(micro), Phase::fwd, sc.first_op_deps, gathered, -1, false);
    }
    sc.alloc_at_start = std::move(alloc_first);
    TapeState st = emit_forward(w, tape, policy_for(layer), sc, in.buffer, in.producer);
    first_fwd_op_[layer] = st.first_op;
    const Boundary out{st.output_buffer, st.output_producer};
    states_[{micro, layer}] = std::move(st);
    return out;
  }

  // The op whose start lets layer `layer`'s gathers begin: `prefetch` layers earlier.
  // The first unit of a pass has no earlier layer to wait for: its gathers are issued where the
  // compute stream is now (FSDP2's pre-forward hook of the root), not at the start of the step.
  int64_t prefetch_anchor_forward(const ProgramWriter& w, int64_t layer) const {
    const int64_t k = spec_.parallel.fsdp.prefetch;
    if (k == 0) return last_compute(w);  // no prefetch: gathered when the unit is reached
    auto it = first_fwd_op_.find(layer - k);
    if (it != first_fwd_op_.end() && it->second >= pass_start_) return it->second;
    return last_compute(w);
  }

  // The last compute op emitted so far (before the overlapped forward, while the backward of an
  // overlapped pair is emitted), -1 if none.
  int64_t last_compute(const ProgramWriter& w) const {
    const auto& ops = w.program().ops;
    const size_t end = schedule_point_limit_ >= 0 ? static_cast<size_t>(schedule_point_limit_) : ops.size();
    for (size_t i = end; i-- > 0;) {
      if (queue_of(ops[i]) == kComputeQueue) return static_cast<int64_t>(i);
    }
    return -1;
  }

  void backward(ProgramWriter& w, int64_t micro, const ChunkPlace& place) {
    if (defer_weights_) held_back_.push_back({micro, {}});
    const double hidden_bytes = elements(c_.sp_tokens(), m_.hidden_size) * dtype_bytes(c_.act);
    const int32_t mi = static_cast<int32_t>(micro);
    const auto& layers = place.layers;
    Boundary grad{0, -1};
    int64_t anchor = -1;
    backward_order_.clear();
    if (place.last) backward_order_.push_back(m_.num_layers + 1);
    backward_order_.insert(backward_order_.end(), layers.rbegin(), layers.rend());
    if (place.first && c_.train_base) backward_order_.push_back(0);
    if (place.last) {
      const int64_t head = m_.num_layers + 1;
      auto [dx, producer] = emit_loss_backward(w, c_, policy_for(head), mi, loss_.at(micro));
      anchor = producer;
      grad = run_unit_backward(w, head, micro, build_final_norm_tape(c_), Boundary{dx, producer}, anchor);
      anchor = grad.producer;
    } else {
      const uint32_t r = p2p(w, OpKind::recv, place.next, micro, layers.empty() ? 0 : layers.back(), Phase::bwd,
                             hidden_bytes, "pp_recv.gradient");
      post_at_schedule_point(w, r);
      const uint32_t b = w.buffer(hidden_bytes, MemCategory::gradient, "pp.gradient_in");
      w.effect(r, b, MemAction::alloc);
      grad = Boundary{b, r};
      anchor = r;
    }
    for (auto it = layers.rbegin(); it != layers.rend(); ++it) {
      grad = run_unit_backward(w, *it, micro, build_layer_tape(c_, *it), grad, anchor);
      anchor = first_bwd_op_.at(*it);
    }
    if (place.first) {
      if (c_.train_base) {
        grad = run_unit_backward(w, 0, micro, build_embedding_tape(c_), grad, anchor);
      } else {
        release_embedding(w, micro, grad);
      }
    } else {
      send_away(w, place.previous, micro, layers.empty() ? m_.num_layers + 1 : layers.front(), Phase::bwd, hidden_bytes,
                "pp_send.gradient", grad);
    }
  }

  // A frozen embedding has no backward: the gradient arriving at it and the kept token ids end.
  void release_embedding(ProgramWriter& w, int64_t micro, Boundary grad) {
    TapeState& st = states_.at({micro, 0});
    Op op;
    op.kind = OpKind::elementwise;
    op.phase = Phase::bwd;
    op.layer = 0;
    op.micro = static_cast<int32_t>(micro);
    const uint32_t i = w.add(op, "embedding.release");
    if (grad.producer >= 0) w.order_after(i, static_cast<uint32_t>(grad.producer));
    w.effect(i, grad.buffer, MemAction::free);
    for (int64_t b : st.buffer) {
      if (b >= 0 && static_cast<uint32_t>(b) != st.output_buffer) w.effect(i, static_cast<uint32_t>(b), MemAction::free);
    }
    states_.erase({micro, 0});
  }

  Boundary run_unit_backward(ProgramWriter& w, int64_t layer, int64_t micro, const LayerTape& tape, Boundary grad_out,
                             int64_t anchor) {
    EmitScope sc = scope(layer, micro);
    std::vector<uint32_t> gathered;  // below ZeRO-3 full parameters are resident: nothing to gather
    if (gather_once_per_step_) {
      if (last_micro(micro)) {  // the unit's last backward reshards
        gathered = held_for_step_.at(layer);
        held_for_step_.erase(layer);
      }
    } else if (regathers_in_backward()) {
      if (auto it = prefetched_.find({micro, layer}); it != prefetched_.end()) {
        sc.first_op_deps = std::move(it->second.ops);
        gathered = std::move(it->second.buffers);
        for (const CopyOut& o : it->second.copy_outs) copy_out(w, o, sc.first_op_deps, gathered);
        prefetched_.erase(it);
      } else {
        gather(w, layer, static_cast<int32_t>(micro), Phase::bwd, sc.first_op_deps, gathered,
               prefetch_anchor_backward(w, layer), true);
      }
    } else if (zero_stage_ >= 3) {
      gathered = held_.at({micro, layer});
      held_.erase({micro, layer});
    }
    sc.free_at_end = gathered;
    const std::vector<uint32_t> grads = grad_buffers(w, layer, micro, sc.alloc_at_start);
    step_grads_at_backward(w, layer, sc.alloc_at_start);
    TapeState& st = states_.at({micro, layer});
    const BackwardResult r = emit_backward(w, tape, policy_for(layer), sc, st, grad_out.buffer, grad_out.producer, anchor);
    first_bwd_op_[layer] = r.first_compute_op;
    prefetch_backward_gathers(w, layer, micro, r.first_compute_op);
    if (defer_weights_) {
      // The weight gradients, and the reduction that needs them, wait for the weight pass.
      held_back_.back().units.push_back(DeferredUnit{layer, r.last_op, r.weight_grads, grads});
    } else {
      finish_gradients(w, layer, static_cast<int32_t>(micro), r.last_op, grads);
    }
    states_.erase({micro, layer});
    return Boundary{r.input_grad_buffer, r.input_grad_producer};
  }

  // A zero-bubble weight pass: the held-back weight gradients of the oldest backward still holding
  // some (FIFO), unit by unit in backward order, each unit's gradient reduction after its last one.
  void weight_gradients(ProgramWriter& w) {
    if (held_back_.empty()) throw std::logic_error("pipeline schedule: a weight pass without a held-back backward");
    const HeldBack chunk = std::move(held_back_.front());
    held_back_.pop_front();
    for (const DeferredUnit& u : chunk.units) {
      const int64_t last = emit_weight_grads(w, u.weight_grads);
      finish_gradients(w, u.layer, static_cast<int32_t>(chunk.micro), last >= 0 ? static_cast<uint32_t>(last) : u.backward_end,
                       u.grads);
    }
  }

  // A unit's gradients of micro-batch `micro` are complete after op `after`: reduced now (or,
  // without overlap_grad_reduce, once the step's backward is done: reduce_deferred), or
  // accumulated for a later micro-batch's reduction.
  void finish_gradients(ProgramWriter& w, int64_t layer, int32_t micro, uint32_t after, const std::vector<uint32_t>& grads) {
    grads_done_[layer] = after;
    if (!syncs(micro)) {
      accumulate_unsynced(w, layer, micro, after);
      return;
    }
    if (!spec_.parallel.fsdp.overlap_grad_reduce) {
      deferred_reductions_.push_back({layer, micro, grads});
      return;
    }
    reduce_unit(w, layer, micro, after, grads);
  }

  void reduce_unit(ProgramWriter& w, int64_t layer, int32_t micro, uint32_t after, const std::vector<uint32_t>& grads) {
    std::vector<uint32_t> reduced = reduce(w, layer, micro, after, grads);
    if (!reduced.empty()) last_reduce_[layer] = std::move(reduced);
    if (dualpipe_ && last_micro(micro)) mirror_gradients(w, layer);
  }

  // Gradient reductions without overlap (Megatron-LM's reduce_model_grads after
  // forward_backward_func, DeepSpeed's pipeline ReduceGrads instruction): all of them start after
  // the step's last backward op on the compute queue, in the order the units finished.
  void reduce_deferred(ProgramWriter& w) {
    const int64_t end = last_compute(w);
    for (const DeferredReduction& d : deferred_reductions_) {
      reduce_unit(w, d.layer, d.micro, end >= 0 ? static_cast<uint32_t>(end) : grads_done_.at(d.layer), d.grads);
    }
    deferred_reductions_.clear();
  }

  // ZeRO-3 with reshard_after_forward gathers every unit again for its backward.
  bool regathers_in_backward() const {
    return !gather_once_per_step_ && zero_stage_ >= 3 && spec_.parallel.fsdp.reshard_after_forward;
  }

  // FSDP2's backward prefetch: a unit's pre-backward hook issues the gathers of the next `prefetch`
  // units of the backward, and its post-backward hook the unit's gradient reduction, so on the
  // data-parallel queues the next unit's all-gather comes before this unit's reduce-scatter (on
  // one communicator NCCL runs them in issue order). Emitted here, between the unit's backward and
  // its reduction, each gather starting with the unit's first backward (or recompute) op; the
  // copy-outs wait for the unit itself (its pre-backward hook, after this unit's post-backward).
  void prefetch_backward_gathers(ProgramWriter& w, int64_t layer, int64_t micro, uint32_t first_op) {
    const int64_t k = spec_.parallel.fsdp.prefetch;
    if (!regathers_in_backward() || k == 0) return;
    auto here = std::find(backward_order_.begin(), backward_order_.end(), layer);
    if (here == backward_order_.end()) return;
    const auto ahead = std::min<int64_t>(k, std::distance(here, backward_order_.end()) - 1);
    for (auto next = here + 1; next != here + 1 + ahead; ++next) {
      if (prefetched_.contains({micro, *next})) continue;
      Prefetched& p = prefetched_[{micro, *next}];
      gather(w, *next, static_cast<int32_t>(micro), Phase::bwd, p.ops, p.buffers, first_op, true, &p.copy_outs);
    }
  }

  int64_t prefetch_anchor_backward(const ProgramWriter& w, int64_t layer) const {
    const int64_t k = spec_.parallel.fsdp.prefetch;
    if (k == 0) return last_compute(w);
    auto it = first_bwd_op_.find(layer + k);
    if (it != first_bwd_op_.end() && it->second >= pass_start_) return it->second;
    return last_compute(w);
  }

  // DualPipe's two copies of each stage (stage s on rank s and on rank p-1-s) sum their gradients
  // once a unit's are complete: an exchange with the mirror rank of the unit's reduced gradients
  // (its shard when the data-parallel reduction scattered them), summed in place as an all-reduce
  // of the pair does (the add runs in the communication kernels, not on the compute stream). It
  // runs on pipeline queues of its own channel, overlapped with the rest of the backward; both
  // ends complete their units in the same order (the schedule is symmetric, phase 0 being the
  // same model stage on both), so the channel's order matches.
  void mirror_gradients(ProgramWriter& w, int64_t layer) {
    double elements = 0;
    for (const Part& part : parts(units_.at(layer))) {
      const int64_t shards = plan_.group_size(part.shard_group);
      elements += part.trainable / static_cast<double>(zero_stage_ >= 1 && shards > 1 ? shards : 1);
    }
    if (elements <= 0) return;
    std::vector<uint32_t> ready;
    if (auto it = last_reduce_.find(layer); it != last_reduce_.end()) {
      ready = it->second;
    } else {
      ready.push_back(grads_done_.at(layer));
    }
    const double bytes = elements * dtype_bytes(spec_.training.precision.grad_reduce);
    const int64_t mirror = spec_.parallel.pp.stages - 1 - 2 * stage_;  // offset of rank p-1-s
    const std::string name = unit_name(layer) + ".dualpipe_mirror_grad.";
    std::vector<uint32_t> exchange;
    for (OpKind kind : {OpKind::send, OpKind::recv}) {
      const uint32_t op = p2p(w, kind, mirror, -1, layer, Phase::optimizer, bytes, name + std::string(enum_name(kind)));
      for (uint32_t r : ready) w.order_after(op, r);
      exchange.push_back(op);
    }
    last_reduce_[layer] = exchange;
  }

  // PyTorch's multi-tensor AdamW (torch/optim/adamw.py, _multi_tensor_adamw; weight decay, no
  // amsgrad), bytes per trainable parameter with p the master weights, g the gradients, m and v
  // the moments and t the temporary (v's format): p *= 1 - lr wd (p -> p); lerp_(m, g) (m g -> m);
  // v *= b2 (v -> v); addcmul_(v, g, g) (v g -> v); t = sqrt(v) (v -> t); t /= bc2 (t -> t);
  // t += eps (t -> t); addcdiv_(p, m, t) (p m t -> p): 8 kernels.
  struct ForeachAdamw {
    int32_t kernels;
    double read, written, temp;
  };
  static ForeachAdamw foreach_adamw(const PrecisionSpec& prec) {
    const double p = dtype_bytes(prec.master_params), g = dtype_bytes(prec.grads), s = dtype_bytes(prec.optimizer_states);
    return {8, p + (s + g) + s + (s + g) + s + s + s + (p + s + s), p + s + s + s + s + s + s + p, s};
  }

  void optimizer(ProgramWriter& w) {
    const auto& prec = spec_.training.precision;
    const double states = spec_.training.optimizer.kind == OptimizerKind::adamw ? 2.0 : 1.0;
    const bool foreach = spec_.training.optimizer.implementation == OptimizerImplementation::foreach;
    const ForeachAdamw f = foreach_adamw(prec);
    double all_trainable = 0;
    for (const auto& [layer, u] : units_) all_trainable += optimizer_share(u);
    const uint32_t foreach_temp =
        foreach ? w.buffer(all_trainable * f.temp, MemCategory::workspace, "optimizer.foreach_temp") : 0;
    int64_t last_optimizer_op = -1;
    int64_t last_update = -1;  // the last op of the parameters' update
    for (const auto& [layer, u] : units_) {
      const double trainable = optimizer_share(u);
      if (trainable <= 0) continue;
      Op op;
      // CPU offload: the step runs on the host CPUs (ZeRO-Offload's CPU-Adam, FSDP2's optimizer on
      // CPU tensors), timed by its bytes over the host's optimizer bandwidth (cost_model.cpp); it
      // sits on the compute queue, which waits for it as the training loop does.
      const bool on_host = offload_ != OffloadKind::none;
      op.kind = on_host ? OpKind::host_optimizer : OpKind::optimizer;
      op.phase = Phase::optimizer;
      op.dtype = Dtype::fp32;
      op.layer = static_cast<int32_t>(layer);
      op.flops = 12.0 * trainable;  // AdamW: moments, bias correction, decoupled decay, update
      const double per_param = dtype_bytes(prec.master_params) + dtype_bytes(prec.grads) + states * dtype_bytes(prec.optimizer_states);
      op.bytes_read = trainable * per_param;
      op.bytes_written = trainable * (dtype_bytes(prec.master_params) + states * dtype_bytes(prec.optimizer_states));
      if (foreach) {
        op.num_kernels = f.kernels;
        op.bytes_read = trainable * f.read;
        op.bytes_written = trainable * f.written;
      }
      const uint32_t i = w.add(op, unit_name(layer) + (on_host ? ".cpu_adamw" : ".adamw"));
      if (foreach) {
        // The denominators' temporary spans the whole step's parameters at once (each foreach
        // kernel runs over every tensor before the next starts): from the first unit's op to the last.
        if (last_optimizer_op < 0) w.effect(i, foreach_temp, MemAction::alloc);
        last_optimizer_op = i;
      }
      if (auto it = step_grads_.find(layer); it != step_grads_.end()) {
        for (uint32_t b : it->second) w.effect(i, b, MemAction::free);
      }
      if (auto it = last_reduce_.find(layer); it != last_reduce_.end()) {
        for (uint32_t r : it->second) w.order_after(i, r);
      }
      // Offload optimizer: the updated low-precision shard goes back to the parameters in HBM (the
      // next step gathers from it); offload parameters updates the host shard in place.
      last_update = i;
      if (offload_ == OffloadKind::optimizer) {
        const uint32_t c = host_copy(w, OpKind::swap_in, layer, -1, Phase::optimizer, trainable * dtype_bytes(prec.params),
                                     unit_name(layer) + ".offload_params_h2d");
        w.order_after(c, i);
        last_update = c;
      }
    }
    if (last_optimizer_op >= 0) {
      // No op follows the optimizer ops under foreach (no offload copies): the last one is the
      // last added, which the writer lets take the release.
      w.effect(static_cast<uint32_t>(last_optimizer_op), foreach_temp, MemAction::free);
    }
    gather_after_optimizer(w, last_update);
  }

  // ZeRO 1-2 without overlap_param_gather: the updated parameters are all-gathered after the
  // whole optimizer step (Megatron-LM's gather_model_params, DeepSpeed's ZeRO-1/2 step), unit by
  // unit on the data-parallel queues, the step ending when they have arrived.
  void gather_after_optimizer(ProgramWriter& w, int64_t after) {
    if (spec_.parallel.fsdp.overlap_param_gather || zero_stage_ < 1 || zero_stage_ > 2) return;
    for (const auto& [layer, u] : units_) {
      std::vector<uint32_t> ops, buffers;
      gather(w, layer, -1, Phase::optimizer, ops, buffers, after, false);
    }
  }

  const ScenarioSpec& spec_;
  const ModelSpec& m_;
  const ParallelPlan& plan_;
  LayerContext c_;
  int64_t num_micro_ = 1;
  std::map<int64_t, Unit> units_;
  std::map<std::pair<int64_t, int64_t>, TapeState> states_;
  std::map<std::pair<int64_t, int64_t>, std::vector<uint32_t>> held_;  // (micro, layer): gathered until its backward
  std::map<int64_t, std::vector<uint32_t>> held_for_step_;              // layer: gathered once, see gather_once_per_step_
  bool gather_once_per_step_ = false;
  std::map<int64_t, LossState> loss_;
  std::map<int64_t, uint32_t> first_fwd_op_;
  std::map<int64_t, uint32_t> first_bwd_op_;
  struct Prefetched {
    std::vector<uint32_t> ops;        // the unit's first backward op waits for these
    std::vector<uint32_t> buffers;    // freed at the unit's backward end
    std::vector<CopyOut> copy_outs;   // emitted when the unit is reached
  };
  std::map<std::pair<int64_t, int64_t>, Prefetched> prefetched_;  // (micro, layer): gathered ahead of its backward
  std::vector<int64_t> backward_order_;                           // units of the backward being emitted, in order
  std::map<int64_t, std::vector<uint32_t>> last_reduce_;  // per layer, each gradient part's last reduction
  std::map<int64_t, std::vector<uint32_t>> step_grads_;   // per layer, its per-step gradient buffers
  std::set<std::pair<int64_t, std::string>> step_grads_held_;  // (layer, part) whose buffer exists
  int64_t pass_start_ = 0;  // first op index of the forward or backward being emitted
  int64_t zero_stage_ = 3;
  OffloadKind offload_ = OffloadKind::none;
  int64_t stage_ = 0;  // the stage whose program is being built
  bool zero_bubble_ = false;
  bool dualpipe_ = false;
  bool overlap_forward_backward_ = true;
  bool defer_weights_ = false;         // the backward being emitted holds its weight gradients back
  int64_t schedule_point_limit_ = -1;  // >= 0: receives are posted as if emitted before this op
  struct DeferredReduction {
    int64_t layer;
    int32_t micro;
    std::vector<uint32_t> grads;
  };
  std::vector<DeferredReduction> deferred_reductions_;  // without overlap_grad_reduce, until the backward ends
  struct DeferredUnit {
    int64_t layer;
    uint32_t backward_end;
    std::vector<DeferredWeightGrad> weight_grads;
    std::vector<uint32_t> grads;  // unsharded gradient buffers its reduction releases
  };
  struct HeldBack {  // one backward's held-back weight gradients, unit by unit in backward order
    int64_t micro;
    std::vector<DeferredUnit> units;
  };
  std::deque<HeldBack> held_back_;     // oldest first: weight passes take them in order
  std::map<int64_t, uint32_t> grads_done_;  // per layer: the op that completes its gradients
  bool sync_every_micro_ = true;
  std::map<int64_t, std::vector<uint32_t>> accumulated_;  // per layer: unsharded gradients held across micro-batches
};

}  // namespace

std::vector<PersistentMemory> persistent_state(const Scenario& s, const ParallelPlan& plan, bool with_adapters) {
  StepBuilder builder(s, plan);
  std::vector<PersistentMemory> out;
  for (int64_t stage = 0; stage < plan.num_programs(); ++stage) out.push_back(builder.persistent_state(stage, with_adapters));
  return out;
}

StepGraph build_step_graph(const Scenario& s) {
  StepGraph g;
  g.scenario = s.spec.name;
  g.source = s.file;
  g.plan = build_parallel_plan(s.spec);
  StepBuilder builder(s, g.plan);
  for (int64_t stage = 0; stage < g.plan.num_programs(); ++stage) g.programs.push_back(builder.build(stage));
  g.num_micro_batches = builder.num_micro();
  g.tokens_per_micro_batch = builder.tokens();
  g.tokens_per_step = s.spec.batch.global_batch_size * s.spec.batch.sequence_length;
  g.seq_len = s.spec.batch.sequence_length;
  g.allocator_fragmentation = s.spec.memory.allocator_fragmentation;
  g.host_op_issue_s = s.spec.host.op_issue.value;
  g.host_kernel_issue_s = s.spec.host.kernel_issue.value;
  g.host_waits_for_routing = s.model.moe && s.spec.host.waits_for_routing &&
                             !(s.spec.routing.capacity_factor && s.spec.routing.capacity_policy == CapacityPolicy::pad);
  g.expert_dispatch = s.spec.parallel.ep_dispatch;
  // The software stack's share: the runtime, and one set of collective-library buffers per
  // communicator a program uses (group kinds with more than one member that it communicates
  // over), sized by the collective kinds that communicator runs.
  const double runtime = runtime_reserved_bytes(s.spec, s.hardware);
  for (Program& p : g.programs) {
    std::array<std::set<std::string>, kNumGroupKinds> kinds;
    for (const Op& op : p.ops) {
      if (!is_communication(op.kind) || g.plan.group_size(op.group) <= 1) continue;
      kinds[static_cast<size_t>(op.group)].insert(is_p2p(op.kind) ? "all_to_all" : std::string(enum_name(op.kind)));
    }
    p.persistent.runtime = runtime;
    for (const auto& k : kinds) {
      if (!k.empty()) p.persistent.runtime += comm_buffer_bytes(s.spec, s.hardware, {k.begin(), k.end()});
    }
  }
  if (s.model.moe) {
    const int64_t per_node = routing_ranks_per_node(s, g.plan);
    g.routing.emplace(s.spec.routing, s.model.moe->num_experts, s.model.moe->top_k, g.plan.group_size(GroupKind::ep),
                      s.routing_histogram, per_node);
  }
  return g;
}

int64_t routing_ranks_per_node(const Scenario& s, const ParallelPlan& plan) {
  const int64_t per_node = ep_ranks_per_node(plan, s.hardware.fabric.scale_up.domain_size);
  const RoutingSpec& r = s.spec.routing;
  if (r.nodes_per_token > 0 && s.model.moe) {
    if (per_node == 0) {
      throw InputError(s.file, "/routing/nodes_per_token",
                       "the EP group's ranks do not fill scale-up domains in equal consecutive blocks, so nodes "
                       "cannot be units of routing");
    }
    const int64_t held = r.nodes_per_token * per_node * (s.model.moe->num_experts / plan.group_size(GroupKind::ep));
    if (held < s.model.moe->top_k) {
      throw InputError(s.file, "/routing/nodes_per_token",
                       "holds " + std::to_string(held) + " experts, fewer than top_k (" +
                           std::to_string(s.model.moe->top_k) + ")");
    }
  }
  return per_node;
}

int64_t ep_ranks_per_node(const ParallelPlan& plan, int64_t domain_size) {
  const std::vector<int64_t> members = plan.members(0, GroupKind::ep);
  if (members.empty() || domain_size <= 0) return 0;
  int64_t block = 0;  // members of the first domain
  int64_t run = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    const bool same = i > 0 && members[i] / domain_size == members[i - 1] / domain_size;
    if (i > 0 && !same) {
      if (members[i] / domain_size < members[i - 1] / domain_size) return 0;  // not consecutive blocks
      if (block == 0) block = run;
      if (run != block) return 0;
      run = 0;
    }
    ++run;
  }
  if (block == 0) block = run;
  return run == block ? block : 0;
}

}  // namespace moesim
