// SPDX-License-Identifier: MIT
// TapeBuilder: adds forward ops to a LayerTape with the conventions every layer kind shares -
// GEMMs with their LoRA adapters and backward rules, pointwise ops, communication and the entry
// and exit of tensor-parallel regions. Internal to src/graph.
#pragma once

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "graph/layer_ops.hpp"

namespace moesim {

inline TensorDesc matrix_desc(int64_t a, int64_t b, Dtype dt) { return TensorDesc{{a, b, 0, 0}, dt}; }

inline double bytes_of(int64_t elements, Dtype dt) { return static_cast<double>(elements) * dtype_bytes(dt); }

// Adds ops to a tape with the conventions shared by all layer kinds.
class TapeBuilder {
 public:
  TapeBuilder(const LayerContext& c, LayerTape& tape) : c_(c), t_(tape) {}

  int tensor(int64_t rows, int64_t cols, std::string name, Dtype dt, bool requires_grad = true) {
    return t_.tensor(matrix_desc(rows, cols, dt), std::move(name), requires_grad);
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
                         matrix_desc(c_.tokens, d, c_.act), bytes_of(c_.tokens * d, c_.act));
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
                         matrix_desc(c_.sp_tokens(), d, c_.act), bytes_of(c_.tokens * d, c_.act));
    }
    return communicate(OpKind::all_reduce, GroupKind::tp, name + ".tp_all_reduce", y, matrix_desc(c_.tokens, d, c_.act),
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

}  // namespace moesim
