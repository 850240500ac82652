// SPDX-License-Identifier: MIT
// TapeBuilder: adds forward ops to a LayerTape with the conventions every layer kind shares -
// GEMMs with their LoRA adapters and backward rules, pointwise ops, communication and the entry
// and exit of tensor-parallel regions. Internal to src/graph.
//
// TP communication overlap (parallel.tp.comm_overlap: Megatron-Core's userbuffers, torchtitan's
// AsyncTP) decomposes a sequence-parallel all-gather or reduce-scatter into tp ring steps, each
// moving one rank's rows while the adjacent GEMM works on another's. With g the GEMM's time per
// ring step (its time / tp) and c the collective's per step (its time / (tp - 1)), the ring ends
// after g + (tp - 1) max(g, c): the GEMM's time when it is the longer, g + the collective's otherwise.
// The graph gets exactly that from two pieces of each GEMM and the engine's queues:
//   - all-gather then projection: the projection's first tp - 1 steps' rows ("main", which reads
//     the rank's own shard, so it starts with the gather) and the last step's rows ("last_chunk",
//     after the gather); a region's several projections run all their mains, then all last chunks;
//   - projection then reduce-scatter: the first step's rows (which the reduce-scatter waits for),
//     then the rest ("rest", beside the reduce-scatter);
// and the piece that the region's collective does not wait for joins the GEMM's output at its first
// consumer (an extra input: a dependency, no bytes). The backward, derived from the forward, mirrors
// it: the reduce-scatter of the input gradient runs beside the main's data gradient, the
// all-gather of the output gradient beside the rest's. Chunked, a piece of several ring steps runs
// as that many GEMMs of one step's rows (a launch each, the GEMM efficiency of rows / tp), each
// reading the whole weight; fused, each piece runs at the whole projection's efficiency. The FLOPs
// add up to the unsplit GEMM's. The engine's overlap_slowdown applies while the collective runs.
// Memory is the unsplit graph's: the pieces of a gathered projection write the main's full-size
// output (the last chunk's own output is an empty token), those of a scattered one its two parts.
#pragma once

#include <algorithm>
#include <cassert>
#include <exception>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "graph/elementwise_kernels.hpp"
#include "graph/layer_ops.hpp"
#include "graph/quantize_casts.hpp"

namespace moesim {

inline TensorDesc matrix_desc(int64_t a, int64_t b, Dtype dt) { return TensorDesc{{a, b, 0, 0}, dt}; }

inline double bytes_of(double num_elements, Dtype dt) { return num_elements * dtype_bytes(dt); }

// Adds ops to a tape with the conventions shared by all layer kinds.
class TapeBuilder {
 public:
  TapeBuilder(const LayerContext& c, LayerTape& tape) : c_(c), t_(tape) {}
  ~TapeBuilder() {
    // A bug, not an input error: a split projection's piece left without the consumer it joins
    // (unless the tape is abandoned by an exception).
    assert(std::uncaught_exceptions() > 0 || (pending_tails_.empty() && joins_.empty()));
  }
  TapeBuilder(const TapeBuilder&) = delete;
  TapeBuilder& operator=(const TapeBuilder&) = delete;

  int tensor(int64_t rows, int64_t cols, std::string name, Dtype dt, bool requires_grad = true) {
    return t_.tensor(matrix_desc(rows, cols, dt), std::move(name), requires_grad);
  }
  int act_tensor(int64_t rows, int64_t cols, std::string name) { return tensor(rows, cols, std::move(name), c_.act); }

  // y = x W: x (rows x in) -> y (rows x out). The weight is trainable when the base is trained;
  // a LoRA adapter (rank r: x A B) is added when `lora` is targeted and the base is frozen.
  int gemm(const std::string& name, int x, int64_t rows, int64_t in, int64_t out, std::optional<LoraTarget> lora = {},
           std::optional<SwapTarget> swap = {}) {
    const bool adapter = lora && c_.lora_on(*lora) && !c_.train_base;
    return linear(OpKind::gemm, name, x, rows, in, out, 0, -1, adapter, swap);
  }

  // y = x W + acc, the sum in the GEMM's epilogue (which reads acc): acc's gradient is y's.
  int gemm_accumulate(const std::string& name, int x, int acc, int64_t rows, int64_t in, int64_t out,
                      std::optional<LoraTarget> lora = {}) {
    const bool adapter = lora && c_.lora_on(*lora) && !c_.train_base;
    return linear(OpKind::gemm, name, x, rows, in, out, 0, -1, adapter, {}, RoutingPart::all, acc);
  }

  // Grouped GEMM over this rank's experts: x (rows x in) -> (rows x out), rows set by routing
  // (`part` of them under local-first dispatch).
  int grouped_gemm(const std::string& name, int x, int64_t rows, int64_t in, int64_t out, int32_t routing_layer,
                   std::optional<SwapTarget> swap, RoutingPart part = RoutingPart::all) {
    const bool adapter = c_.lora_on(LoraTarget::routed_experts) && !c_.train_base;
    return linear(OpKind::grouped_gemm, name, x, rows, in, out, static_cast<int32_t>(c_.experts_per_rank),
                  routing_layer, adapter, swap, part);
  }

  // An elementwise-like op (norm, activation, add): cheap, recomputed under selective recompute.
  // `row_width`: a norm's normalised width (its op's k; see norm), 0 for other kinds.
  int pointwise(OpKind kind, const std::string& name, std::vector<int> inputs, int64_t rows, int64_t cols,
                double flops_per_element, std::vector<int> needs, Dtype out_dtype, int64_t row_width = 0) {
    const int y = tensor(rows, cols, name + ".out", out_dtype);
    TapeOp op;
    op.op.kind = kind;
    op.op.k = row_width;
    op.op.dtype = c_.act;
    op.op.flops = flops_per_element * elements(rows, cols);
    for (int in : inputs) op.op.bytes_read += t_.tensors()[static_cast<size_t>(in)].desc.bytes();
    op.op.bytes_written = t_.tensors()[static_cast<size_t>(y)].desc.bytes();
    op.name = name;
    op.inputs = std::move(inputs);
    op.outputs = {y};
    op.bwd_needs = std::move(needs);
    op.bwd_kind = kind;
    op.bwd_flops = 2 * op.op.flops;
    op.cheap = true;
    push(std::move(op));
    return y;
  }

  // A norm of `rows` x `cols`, normalising rows of `width` elements (0: whole rows of `cols`; a
  // per-head norm: the head dimension), kept as the op's k: kernels of one size run at different
  // rates by the width they reduce over (a calibration keeps tables per width, trace_fit.hpp).
  int norm(const std::string& name, int x, int64_t rows, int64_t cols, int64_t width = 0) {
    const int y = pointwise(OpKind::norm, name, {x}, rows, cols, 4.0, {x}, c_.act, width > 0 ? width : cols);
    run_as_scenario_says(c_.model->norm == NormKind::layernorm ? ElementwiseForm::layer_norm : ElementwiseForm::rms_norm,
                         rows, cols);
    return y;
  }

  // The FFN activation on the up-projection's output `ups` (rows x f, or x 2f when gated: one
  // tensor of both halves, or the gate's and the up-projection's apart).
  int activation(const std::string& name, const std::vector<int>& ups, int64_t rows, int64_t f) {
    const bool gated = is_gated(c_.model->activation);
    const int y = pointwise(OpKind::activation, name, ups, rows, f, gated ? 4.0 : 8.0, ups, c_.act);
    const ElementwiseForm form = !gated           ? ElementwiseForm::activation
                                 : ups.size() == 2 ? ElementwiseForm::gated_activation_apart
                                                   : ElementwiseForm::gated_activation;
    run_as_scenario_says(form, rows, f);
    return y;
  }

  // Rotary position embedding of the query (rows x q_cols) and key (rows x k_cols) heads, an op of
  // its own under compile and eager; hand-fused stacks apply it inside the attention input
  // (fused_ops.elementwise fused: no op, as moesim always costed it). Returns the rotated q and k.
  std::pair<int, int> rope(int q, int k, int64_t rows, int64_t q_cols, int64_t k_cols) {
    if (c_.model->position != PositionKind::rope) return {q, k};
    const ElementwiseWork w = elementwise_work(ElementwiseForm::rope, c_.fused, c_.act);
    if (w.fwd.num_kernels == 0) return {q, k};
    const auto elements = static_cast<double>(rows * (q_cols + k_cols));
    const int qr = act_tensor(rows, q_cols, "attn.rope.q");
    const int kr = act_tensor(rows, k_cols, "attn.rope.k");
    TapeOp op;
    op.op.kind = OpKind::elementwise;
    op.op.dtype = c_.act;
    op.op.flops = 3.0 * elements;  // a pair: four multiplies and two adds
    op.op.num_kernels = w.fwd.num_kernels;
    op.op.bytes_read = w.fwd.read_per_element * elements;
    op.op.bytes_written = w.fwd.written_per_element * elements;
    op.name = "attn.rope";
    op.inputs = {q, k};
    op.outputs = {qr, kr};
    op.bwd_kind = OpKind::elementwise;
    op.bwd_flops = op.op.flops;  // the inverse rotation
    op.bwd_work = PassWork{w.bwd.num_kernels, w.bwd.read_per_element * elements, w.bwd.written_per_element * elements};
    op.cheap = true;
    push(std::move(op));
    return {qr, kr};
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
    push(std::move(op));
    return y;
  }

  // A tensor-parallel region: the group it spans, its degree, and the rows it works on.
  struct TpRegion {
    GroupKind group;
    int64_t degree;
    int64_t rows;
    TpCommOverlap comm_overlap = TpCommOverlap::none;  // its collectives as ring steps under its projections
  };
  TpRegion dense_tp() const { return {GroupKind::tp, c_.tp, c_.tokens}; }
  TpRegion expert_tp() const { return {c_.expert_tp_group, c_.etp, c_.routed_tokens}; }
  // The attention and dense-FFN regions: the projections that Megatron-Core's userbuffers and
  // AsyncTP overlap (not the embedding, the LM head or the MoE block).
  TpRegion projection_tp() const { return {GroupKind::tp, c_.tp, c_.tokens, c_.tp_comm_overlap}; }

  // Enter a TP region: gather the sequence shards (SP), or mark the input gradient for an
  // all-reduce (no SP). `x` is the output of the norm that precedes the region.
  int enter_tp(const std::string& name, int x) { return enter_tp(name, x, dense_tp()); }
  int enter_tp(const std::string& name, int x, const TpRegion& r) {
    if (r.degree == 1) return x;
    const int64_t d = c_.model->hidden_size;
    if (c_.sequence_parallel) {
      const int gathered = communicate(OpKind::all_gather, r.group, name + prefix(r) + "all_gather", x,
                                       matrix_desc(r.rows, d, c_.act), bytes_of(elements(r.rows, d), c_.act));
      // Megatron-LM and Transformer Engine keep the shard and gather it again for the weight gradient.
      t_.mutable_ops().back().rerun_for_backward = c_.sp_gather_again;
      if (r.comm_overlap != TpCommOverlap::none) {
        overlapped_gathers_[gathered] = OverlappedGather{x, r.degree, r.comm_overlap};
      }
      return gathered;
    }
    TapeOp& producer = last_producer_of(x);  // no SP: only the dense region (the checker's rule)
    producer.all_reduce_output_grad = true;
    producer.all_reduce_bytes = bytes_of(elements(r.rows, d), c_.act);
    return x;
  }

  // Leave a TP region: reduce-scatter to sequence shards (SP) or all-reduce (no SP).
  int exit_tp(const std::string& name, int y) { return exit_tp(name, y, dense_tp()); }
  int exit_tp(const std::string& name, int y, const TpRegion& r) {
    if (r.degree == 1) return y;
    const int64_t d = c_.model->hidden_size;
    if (c_.sequence_parallel) {
      const std::string rs_name = name + prefix(r) + "reduce_scatter";
      const TensorDesc rs_out = matrix_desc(r.rows / r.degree, d, c_.act);
      const double rs_bytes = bytes_of(elements(r.rows, d), c_.act);
      auto& ops = t_.mutable_ops();
      const bool split = r.comm_overlap != TpCommOverlap::none && pending_tails_.empty() && !ops.empty() &&
                         ops.back().op.kind == OpKind::gemm && ops.back().outputs == std::vector<int>{y} &&
                         ops.back().op.m >= 2 * r.degree;
      if (!split) return communicate(OpKind::reduce_scatter, r.group, rs_name, y, rs_out, rs_bytes);
      // The projection's first ring step's rows, which the reduce-scatter waits for, then the rest
      // beside it (see the top of this file).
      const TapeOp producer = std::move(ops.back());
      ops.pop_back();
      const int64_t first = producer.op.m / r.degree;
      t_.set_desc(y, matrix_desc(first, producer.op.n, c_.act));
      push(piece_of(producer, first, 1, r.degree, r.comm_overlap, producer.name, true));
      const auto head = static_cast<int32_t>(ops.size() - 1);
      const int scattered = communicate(OpKind::reduce_scatter, r.group, rs_name, y, rs_out, rs_bytes);
      const int rest_out = act_tensor(producer.op.m - first, producer.op.n, producer.name + ".rest.out");
      TapeOp rest = piece_of(producer, producer.op.m - first, r.degree - 1, r.degree, r.comm_overlap,
                             producer.name + ".rest", false);
      rest.outputs = {rest_out};
      rest.continues = head;
      push(std::move(rest));
      joins_[scattered].push_back(rest_out);
      return scattered;
    }
    return communicate(OpKind::all_reduce, r.group, name + prefix(r) + "all_reduce", y, matrix_desc(r.rows, d, c_.act),
                       bytes_of(elements(r.rows, d), c_.act));
  }


  LayerTape& tape() { return t_; }
  const LayerContext& ctx() const { return c_; }

  TapeOp& add(TapeOp op) { return push(std::move(op)); }

 private:
  struct OverlappedGather {
    int shard;       // the all-gather's input: this rank's rows
    int64_t degree;  // ring steps
    TpCommOverlap form;
  };

  // Adds an op to the tape, after the deferred last chunks of an overlapped gather's projections
  // unless it is another of their mains, and with the pieces it joins as extra inputs.
  TapeOp& push(TapeOp op, bool overlapped_main = false) {
    if (!overlapped_main) {
      for (TapeOp& tail : pending_tails_) {
        attach_joins(tail);
        t_.add(std::move(tail));
      }
      pending_tails_.clear();
    }
    attach_joins(op);
    return t_.add(std::move(op));
  }

  void attach_joins(TapeOp& op) {
    const std::vector<int> inputs = op.inputs;
    for (int in : inputs) {
      const auto it = joins_.find(in);
      if (it == joins_.end()) continue;
      op.inputs.insert(op.inputs.end(), it->second.begin(), it->second.end());
      op.num_joined += static_cast<int32_t>(it->second.size());
      joins_.erase(it);
    }
  }

  // `op`, a matmul over op.m rows, restricted to `rows` of them, which are `num_steps` ring steps:
  // the FLOPs, activation bytes and activation casts in proportion to the rows. Chunked, a GEMM of
  // one step's rows per step: that many launches each way, the efficiency of a step's rows, the whole
  // weight read by each. Fused, the piece of one kernel over the whole projection: its efficiency,
  // one launch and one read of the weight (for the piece that reads it, `weight_casts`). Only the
  // piece with `weight_casts` casts the weight.
  TapeOp piece_of(const TapeOp& op, int64_t rows, int64_t num_steps, int64_t degree, TpCommOverlap form,
                  std::string name, bool weight_casts) const {
    TapeOp part = op;
    const bool chunked = form == TpCommOverlap::chunked;
    const int64_t num_chunks = chunked ? num_steps : 1;
    const double f = static_cast<double>(rows) / static_cast<double>(op.op.m);
    const double weight_bytes = bytes_of(elements(op.op.k, op.op.n), c_.compute);
    const double weight_reads = chunked ? static_cast<double>(num_chunks) : weight_casts ? 1.0 : 0.0;
    part.name = std::move(name);
    part.op.m = chunked ? op.op.m / degree : op.op.m;  // the rows the kernel's efficiency is read at
    part.op.num_kernels = static_cast<int32_t>(num_chunks);
    part.op.flops *= f;
    part.bwd_flops *= f;
    part.wgrad_flops *= f;
    part.op.bytes_read = (op.op.bytes_read - weight_bytes) * f + weight_bytes * weight_reads;
    part.op.bytes_written *= f;
    part.bwd_work = PassWork{static_cast<int32_t>(num_chunks), part.op.bytes_read + part.op.bytes_written,
                             part.op.bytes_read};
    for (PassWork* w : {&part.casts.input, &part.casts.grad}) {
      w->bytes_read *= f;
      w->bytes_written *= f;
    }
    if (!weight_casts) part.casts.weight = part.casts.weight_t = PassWork{0, 0, 0};
    return part;
  }

  // A projection of an overlapped all-gather's output, split into its main and last chunk
  // (see the top of this file); the last chunk waits in pending_tails_ for the region's other
  // projections' mains.
  int overlapped_projection(TapeOp base, const OverlappedGather& g) {
    const int64_t last = base.op.m / g.degree;
    const int y = base.outputs.front();
    TapeOp tail = piece_of(base, last, 1, g.degree, g.form, base.name + ".last_chunk", false);
    // The pieces write one output buffer, y's: the last chunk's output is a token of no bytes that
    // carries the dependency to y's consumer.
    const int y_last = act_tensor(0, base.op.n, base.name + ".last_chunk.out");
    tail.outputs = {y_last};
    tail.swap.reset();  // nothing of its own to swap: y, the main's, holds the rows
    TapeOp main = piece_of(base, base.op.m - last, g.degree - 1, g.degree, g.form, base.name, true);
    main.inputs = {g.shard};  // its rows' inputs arrive during the gather; its backward reads the gathered x
    push(std::move(main), true);
    tail.continues = static_cast<int32_t>(t_.ops().size() - 1);
    pending_tails_.push_back(std::move(tail));
    joins_[y].push_back(y_last);
    return y;
  }

  static const char* prefix(const TpRegion& r) { return r.group == GroupKind::tp ? ".tp_" : ".etp_"; }

  // A matmul of `rows` x k inputs by `num_matrices` k x n weights (one, or one per expert): the
  // input gradient always, the weight gradient (which reads the input) when trainable.
  TapeOp matmul(OpKind kind, const std::string& name, std::vector<int> inputs, int output, int64_t rows, int64_t k,
                int64_t n, int64_t num_matrices, bool trainable) const {
    TapeOp op;
    op.op.kind = kind;
    op.op.dtype = c_.compute;
    op.op.trainable_weight = trainable;
    op.op.m = rows;
    op.op.n = n;
    op.op.k = k;
    const double f = 2.0 * static_cast<double>(rows) * static_cast<double>(k) * static_cast<double>(n);
    op.op.flops = f;
    op.op.bytes_read = bytes_of(elements(rows, k), c_.act) + bytes_of(elements(num_matrices, k, n), c_.compute);
    op.op.bytes_written = bytes_of(elements(rows, n), c_.act);
    op.name = name;
    op.inputs = std::move(inputs);
    op.outputs = {output};
    if (trainable) op.bwd_needs = {op.inputs.front()};
    op.bwd_kind = kind;
    op.bwd_flops = f;
    op.wgrad_flops = f;
    return op;
  }

  // A quantised matmul's casts (graph/quantize_casts.hpp): the forward casts the input and the
  // weight, the backward the output gradient and the weight's transposed layout. An input that a
  // sequence-parallel all-gather brings is cast on its shard before the gather (the FP8 stacks
  // gather it quantised), and weights gathered in the compute format (precision.params of 8 bits
  // or fewer: FSDP2's float8 all-gather, Megatron's FP8 parameter gather) were cast on their shard.
  void add_casts(TapeOp& op, double input_elements, double output_elements, double weight_elements) const {
    const PrecisionSpec& p = c_.scenario->training.precision;
    const QuantizationCasts recipe = quantization_casts(p);
    const CastWork x = cast_work(recipe, CastOperand::activation, c_.act, c_.compute);
    if (x.fwd.num_kernels == 0) return;
    const CastWork w = dtype_bytes(p.params) < 2 ? CastWork{}
                                                 : cast_work(recipe, CastOperand::weight, p.params, c_.compute);
    auto work = [](const KernelPass& k, double n) {
      return PassWork{k.num_kernels, k.read_per_element * n, k.written_per_element * n};
    };
    op.casts.input = work(x.fwd, input_elements);
    op.casts.grad = work(x.fwd, output_elements);
    op.casts.weight = work(w.fwd, weight_elements);
    op.casts.weight_t = work(w.bwd, weight_elements);
    op.casts.weight_once_per_step = p.cache_quantized_weights;
  }

  // A base matmul (trainable when the base is trained) and, on request, its LoRA adapter:
  // a = x A (rows x r), y = base + (alpha / r) a B, both adapter matrices trainable.
  int linear(OpKind kind, const std::string& name, int x, int64_t rows, int64_t in, int64_t out, int32_t num_groups,
             int32_t routing_layer, bool adapter, std::optional<SwapTarget> swap,
             RoutingPart part = RoutingPart::all, int accumulate = -1) {
    const int64_t matrices = std::max<int32_t>(num_groups, 1);
    auto tag = [&](TapeOp op) {
      op.op.num_groups = num_groups;
      op.op.routing_layer = routing_layer;
      op.op.routing_part = part;
      return op;
    };
    const int y = act_tensor(rows, out, adapter ? name + ".base_out" : name + ".out");
    TapeOp base = tag(matmul(kind, name, {x}, y, rows, in, out, matrices, c_.train_base));
    base.swap = swap;
    if (accumulate >= 0) {  // with an adapter, the base output takes the sum; lora_b adds onto it
      base.inputs.push_back(accumulate);
      base.op.bytes_read += t_.tensors()[static_cast<size_t>(accumulate)].desc.bytes();
    }
    add_casts(base, elements(rows, in) / gathered_from(x), elements(rows, out), elements(matrices, in, out));
    if (const auto g = overlapped_gathers_.find(x);
        g != overlapped_gathers_.end() && kind == OpKind::gemm && !adapter && rows >= 2 * g->second.degree) {
      return overlapped_projection(std::move(base), g->second);
    }
    push(std::move(base));
    if (!adapter) return y;
    const int64_t r = c_.lora_rank;
    const int a = act_tensor(rows, r, name + ".lora_a");
    push(tag(matmul(OpKind::lora_gemm, name + ".lora_a", {x}, a, rows, in, r, matrices, true)));
    const int yo = act_tensor(rows, out, name + ".out");
    TapeOp lora_b = tag(matmul(OpKind::lora_gemm, name + ".lora_b", {a, y}, yo, rows, r, out, matrices, true));
    lora_b.op.bytes_read += bytes_of(elements(rows, out), c_.act);  // adds onto the base output, which it reads
    push(std::move(lora_b));
    return yo;
  }

  // Re-costs the op just added (a norm or an activation over rows x cols reference elements) as
  // fused_ops.elementwise runs it: its kernels and bytes each way, and under eager the intermediate
  // it keeps for backward. Hand-fused ops keep the pointwise rule above.
  void run_as_scenario_says(ElementwiseForm form, int64_t rows, int64_t cols) {
    if (c_.fused.elementwise == ElementwiseExecution::fused) return;
    const ElementwiseWork w = elementwise_work(form, c_.fused, c_.act);
    const auto elements = static_cast<double>(rows * cols);
    TapeOp& op = t_.mutable_ops().back();
    op.op.num_kernels = w.fwd.num_kernels;
    op.op.bytes_read = w.fwd.read_per_element * elements;
    op.op.bytes_written = w.fwd.written_per_element * elements;
    op.bwd_work = PassWork{w.bwd.num_kernels, w.bwd.read_per_element * elements, w.bwd.written_per_element * elements};
    if (w.kept_copy) {
      const int copy = tensor(rows, cols, op.name + ".saved", *w.kept_copy, false);
      op.outputs.push_back(copy);
      op.bwd_needs.push_back(copy);
    }
  }

  // The ranks whose shards the all-gather that produced `tensor` joined, or 1.
  double gathered_from(int tensor) {
    const TapeOp& p = last_producer_of(tensor);
    if (p.op.kind != OpKind::all_gather || p.outputs.empty() || p.outputs.front() != tensor) return 1;
    if (p.op.group == GroupKind::tp) return static_cast<double>(c_.tp);
    return p.op.group == c_.expert_tp_group ? static_cast<double>(c_.etp) : 1;
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
  std::map<int, OverlappedGather> overlapped_gathers_;  // gathered tensor -> its gather
  std::vector<TapeOp> pending_tails_;                   // last chunks waiting for the region's mains
  std::map<int, std::vector<int>> joins_;               // tensor -> pieces its first consumer also reads
};

}  // namespace moesim
