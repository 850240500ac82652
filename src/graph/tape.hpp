// SPDX-License-Identifier: MIT
// LayerTape: the forward of one layer as a list of ops over named tensors. Layer builders
// (layer_ops.cpp) write only forward ops with what their backward needs; emit_forward and
// emit_backward derive the rest - backward ops, recompute, swap copies, and every buffer's
// allocation and release - so these rules live in one place:
//   - a tensor is allocated when produced and freed after its last forward use, unless the
//     backward needs it (it is "kept"), then after its last backward use;
//   - selective recompute drops the outputs of cheap ops (norms, activations, attention cores) and
//     recomputes them at the start of the layer's backward, keeping their inputs instead; full
//     recompute keeps only the layer input and recomputes the whole layer;
//   - a kept tensor produced by a swap-target op is copied to host memory after its last forward
//     use and back when the backward of the layer after it starts;
//   - the gradient of a tensor is allocated at its first backward consumer and freed at the
//     backward of its producer; gradients of layer inputs pass to the previous layer.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "graph/program.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

struct TapeTensor {
  TensorDesc desc;
  std::string name;
  bool requires_grad = true;  // false for indices and routing decisions
};

// A pass's kernels and HBM traffic, where they are not derived by the default rule.
struct PassWork {
  int32_t num_kernels = 1;
  double bytes_read = 0;
  double bytes_written = 0;
};

// A quantised matmul's casts (graph/quantize_casts.hpp), which its ops run before their matmuls:
// emission adds them to the ops' kernels and Op::cast_bytes (bytes read and written together).
struct MatmulCasts {
  PassWork input{0, 0, 0};     // forward and recompute
  PassWork weight{0, 0, 0};    // forward and recompute
  PassWork grad{0, 0, 0};      // backward: the output gradient
  PassWork weight_t{0, 0, 0};  // backward: the weight's transposed layout
  // The weight's casts only in micro-batch 0's forward and backward, reused by the rest of the
  // step (precision.cache_quantized_weights).
  bool weight_once_per_step = false;
};

struct TapeOp {
  Op op;  // the forward op: kind, dtype, flops, bytes, shape, group, ...
  std::string name;
  std::vector<int> inputs;     // tensor ids
  std::vector<int> outputs;
  std::vector<int> bwd_needs;  // tensors the backward reads
  bool has_bwd = true;
  bool fwd_noop = false;       // exists in backward only (TP's all-reduce of input gradients)
  OpKind bwd_kind = OpKind::elementwise;
  double bwd_flops = 0;        // data-gradient work
  double wgrad_flops = 0;      // weight-gradient work, done when op.trainable_weight
  // The backward's kernels and bytes when not the default rule (read what the forward read and
  // wrote, write the input gradients, one kernel): set for decomposed elementwise ops.
  std::optional<PassWork> bwd_work;
  MatmulCasts casts;  // quantised matmuls only
  bool cheap = false;          // recomputed rather than kept under selective recompute
  int32_t continues = -1;      // a piece of a TP-overlapped projection: the tape op whose calls it continues
  int32_t num_joined = 0;      // the last inputs are such pieces' outputs, joined for order and gradient only
  std::optional<SwapTarget> swap;
  // Tensor parallelism without sequence parallelism: the gradient of this op's output is summed
  // over the TP group (Megatron's "f": identity forward, all-reduce backward) before its backward.
  bool all_reduce_output_grad = false;
  double all_reduce_bytes = 0;
  // Communication only: the bytes of its backward (the adjoint collective) when the gradient
  // travels in another format than the forward's tensor; < 0: the forward's comm_bytes.
  double bwd_comm_bytes = -1;
  // Its output is never kept for the backward: the op runs again before it (ring attention keeps
  // only its rank's keys and values and exchanges them again in the backward).
  bool rerun_for_backward = false;
};

class LayerTape {
 public:
  // The layer's input (the residual stream), tensor 0.
  explicit LayerTape(TensorDesc input, std::string name = "hidden_in", bool requires_grad = true);

  int tensor(TensorDesc desc, std::string name, bool requires_grad = true);
  // A tensor's shape, changed by a builder that splits its producer (before any op reads it).
  void set_desc(int tensor, TensorDesc desc) { tensors_.at(static_cast<size_t>(tensor)).desc = desc; }
  TapeOp& add(TapeOp op);
  void set_output(int tensor) { output_ = tensor; }

  const std::vector<TapeTensor>& tensors() const { return tensors_; }
  const std::vector<TapeOp>& ops() const { return ops_; }
  std::vector<TapeOp>& mutable_ops() { return ops_; }
  int output() const { return output_; }

 private:
  std::vector<TapeTensor> tensors_;
  std::vector<TapeOp> ops_;
  int output_ = 0;
};

// How a layer's activations are treated.
struct TapePolicy {
  RecomputePolicy recompute = RecomputePolicy::none;
  std::vector<SwapTarget> swap;  // swap targets active for this layer
  bool comm_on_compute_stream = false;  // no communication/compute overlap
  // Zero-bubble schedules: a trainable matmul's backward splits into its input gradient (B, in
  // place) and its weight gradient (W), which emit_backward returns for the caller to place later.
  bool split_weight_grad = false;
};

// What the forward leaves for the backward of one (layer, micro-batch).
struct TapeState {
  std::vector<int64_t> buffer;      // per tensor: its buffer id while alive, -1 otherwise
  std::vector<int64_t> producer;    // per tensor: the op that produced it, -1 if none yet
  std::vector<bool> swapped;
  std::vector<int> recompute;       // tape ops recomputed in backward, forward order
  std::vector<bool> kept;
  uint32_t first_op = 0;            // first forward op emitted
  uint32_t last_op = 0;             // last forward op emitted
  uint32_t output_buffer = 0;
  uint32_t output_producer = 0;
};

struct EmitScope {
  int32_t layer = 0;
  int32_t micro = 0;
  std::string prefix;                    // "layer12." for op names
  std::vector<uint32_t> first_op_deps;   // e.g. the FSDP all-gathers of this layer
  std::vector<uint32_t> free_at_end;     // buffers freed by the last op (e.g. gathered parameters)
  std::vector<uint32_t> alloc_at_start;  // buffers allocated by the first op of the pass (backward:
                                         // at the first gradient op, e.g. unsharded grads)
};

// Emits the forward; `input_buffer` and `input_producer` describe the layer input, whose lifetime
// the tape takes over.
TapeState emit_forward(ProgramWriter& w, const LayerTape& tape, const TapePolicy& policy, const EmitScope& scope,
                       uint32_t input_buffer, int64_t input_producer);

// A weight-gradient op held back by a zero-bubble schedule: what it computes, the B op it follows,
// and the buffers it is the last to read (the saved matmul inputs and the output gradients).
struct DeferredWeightGrad {
  Op op;
  std::string name;
  std::vector<TensorDesc> inputs, outputs;
  uint32_t after = 0;
  std::vector<uint32_t> frees;
};

struct BackwardResult {
  uint32_t first_op = 0;
  uint32_t first_compute_op = 0;  // the first recompute or backward op (after any swap-ins)
  uint32_t last_op = 0;
  uint32_t input_grad_buffer = 0;  // gradient of the layer input, for the previous layer to free
  uint32_t input_grad_producer = 0;
  std::vector<DeferredWeightGrad> weight_grads;  // with TapePolicy::split_weight_grad, in backward order
};

// Emits recompute (if any), swap-ins and the backward. `output_grad_*` is the gradient of the
// layer output (allocated by the layer after it); `prefetch_anchor` is the op at which swap-ins
// of this layer may start (the start of the previous backward layer).
BackwardResult emit_backward(ProgramWriter& w, const LayerTape& tape, const TapePolicy& policy,
                             const EmitScope& scope, TapeState& state, uint32_t output_grad_buffer,
                             int64_t output_grad_producer, int64_t prefetch_anchor);

// Emits held-back weight gradients in order; returns the last op emitted (-1 if none).
int64_t emit_weight_grads(ProgramWriter& w, const std::vector<DeferredWeightGrad>& grads);

// The adjoint of a communication op in the backward (all-gather <-> reduce-scatter, ...).
OpKind backward_kind_of_communication(OpKind forward);

}  // namespace moesim
