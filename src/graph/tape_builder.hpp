// SPDX-License-Identifier: MIT
// TapeBuilder: adds forward ops to a LayerTape with the conventions every layer kind shares -
// GEMMs with their LoRA adapters and backward rules, pointwise ops, communication and the entry
// and exit of tensor-parallel regions. Internal to src/graph.
#pragma once

#include <algorithm>
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

  // Grouped GEMM over this rank's experts: x (rows x in) -> (rows x out), rows set by routing
  // (`part` of them under local-first dispatch).
  int grouped_gemm(const std::string& name, int x, int64_t rows, int64_t in, int64_t out, int32_t routing_layer,
                   std::optional<SwapTarget> swap, RoutingPart part = RoutingPart::all) {
    const bool adapter = c_.lora_on(LoraTarget::routed_experts) && !c_.train_base;
    return linear(OpKind::grouped_gemm, name, x, rows, in, out, static_cast<int32_t>(c_.experts_per_rank),
                  routing_layer, adapter, swap, part);
  }

  // An elementwise-like op (norm, activation, add): cheap, recomputed under selective recompute.
  int pointwise(OpKind kind, const std::string& name, std::vector<int> inputs, int64_t rows, int64_t cols,
                double flops_per_element, std::vector<int> needs, Dtype out_dtype) {
    const int y = tensor(rows, cols, name + ".out", out_dtype);
    TapeOp op;
    op.op.kind = kind;
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
    t_.add(op);
    return y;
  }

  int norm(const std::string& name, int x, int64_t rows, int64_t cols) {
    const int y = pointwise(OpKind::norm, name, {x}, rows, cols, 4.0, {x}, c_.act);
    run_as_scenario_says(c_.model->norm == NormKind::layernorm ? ElementwiseForm::layer_norm : ElementwiseForm::rms_norm,
                         rows, cols);
    return y;
  }

  // The FFN activation on the up-projection's output `up` (rows x f, or x 2f when gated).
  int activation(const std::string& name, int up, int64_t rows, int64_t f) {
    const bool gated = is_gated(c_.model->activation);
    const int y = pointwise(OpKind::activation, name, {up}, rows, f, gated ? 4.0 : 8.0, {up}, c_.act);
    run_as_scenario_says(gated ? ElementwiseForm::gated_activation : ElementwiseForm::activation, rows, f);
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
    t_.add(op);
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
    t_.add(op);
    return y;
  }

  // A tensor-parallel region: the group it spans, its degree, and the rows it works on.
  struct TpRegion {
    GroupKind group;
    int64_t degree;
    int64_t rows;
  };
  TpRegion dense_tp() const { return {GroupKind::tp, c_.tp, c_.tokens}; }
  TpRegion expert_tp() const { return {c_.expert_tp_group, c_.etp, c_.routed_tokens}; }

  // Enter a TP region: gather the sequence shards (SP), or mark the input gradient for an
  // all-reduce (no SP). `x` is the output of the norm that precedes the region.
  int enter_tp(const std::string& name, int x) { return enter_tp(name, x, dense_tp()); }
  int enter_tp(const std::string& name, int x, const TpRegion& r) {
    if (r.degree == 1) return x;
    const int64_t d = c_.model->hidden_size;
    if (c_.sequence_parallel) {
      return communicate(OpKind::all_gather, r.group, name + prefix(r) + "all_gather", x, matrix_desc(r.rows, d, c_.act),
                         bytes_of(elements(r.rows, d), c_.act));
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
      return communicate(OpKind::reduce_scatter, r.group, name + prefix(r) + "reduce_scatter", y,
                         matrix_desc(r.rows / r.degree, d, c_.act), bytes_of(elements(r.rows, d), c_.act));
    }
    return communicate(OpKind::all_reduce, r.group, name + prefix(r) + "all_reduce", y, matrix_desc(r.rows, d, c_.act),
                       bytes_of(elements(r.rows, d), c_.act));
  }

  LayerTape& tape() { return t_; }
  const LayerContext& ctx() const { return c_; }

  TapeOp& add(TapeOp op) { return t_.add(std::move(op)); }

 private:
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
             RoutingPart part = RoutingPart::all) {
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
    add_casts(base, elements(rows, in) / gathered_from(x), elements(rows, out), elements(matrices, in, out));
    t_.add(base);
    if (!adapter) return y;
    const int64_t r = c_.lora_rank;
    const int a = act_tensor(rows, r, name + ".lora_a");
    t_.add(tag(matmul(OpKind::lora_gemm, name + ".lora_a", {x}, a, rows, in, r, matrices, true)));
    const int yo = act_tensor(rows, out, name + ".out");
    TapeOp lora_b = tag(matmul(OpKind::lora_gemm, name + ".lora_b", {a, y}, yo, rows, r, out, matrices, true));
    lora_b.op.bytes_read += bytes_of(elements(rows, out), c_.act);  // adds onto the base output, which it reads
    t_.add(lora_b);
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
};

}  // namespace moesim
