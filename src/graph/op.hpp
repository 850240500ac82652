// SPDX-License-Identifier: MIT
// The op: one node of a rank program - a kernel, a collective, or a host copy.
//
// An op carries what the cost model and the executor need: its kind, where it sits (layer,
// micro-batch, phase, stream), the work (FLOPs, HBM bytes, GEMM shape), for collectives the
// process group and the size in nccl-tests' convention, and its memory effects (buffers allocated
// at its start and freed at its end). Ops of one program are stored in arrays (Program); an op
// refers to its tensors, effects and dependencies by index ranges into them.
//
// Sizes that depend on routing (all-to-all, grouped GEMM, permute) hold their expected values
// under the scenario's routing distribution and name the MoE layer in `routing_layer`; the
// engine samples the per-rank values from the graph's RoutingSampler.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>

#include "core/dtype.hpp"
#include "core/enum_names.hpp"
#include "plan/parallel_plan.hpp"

namespace moesim {

enum class OpKind : uint8_t {
  // compute
  embedding,
  norm,
  gemm,
  lora_gemm,
  grouped_gemm,
  activation,
  elementwise,
  short_conv,
  router,
  permute,
  unpermute,
  flash_attention,     // dense causal MLA / GQA / MHA core
  kda,                 // fused chunked KDA (forward or backward)
  kda_gate_cumsum,     // unfused KDA stages
  kda_intra_chunk,
  kda_inter_chunk,
  kda_output,
  kda_state_correction,  // context parallelism: apply the previous CP rank's state
  dsa_indexer,         // fused lightning indexer with top-k (LI)
  indexer_score,       // unfused indexer: scores written out
  topk,
  kv_gather,           // unfused sparse attention: selected latents gathered
  sparse_attention,    // fused sparse flash attention (SFA forward, SFAG backward)
  attention_residual,
  cross_entropy,
  cce_loss,            // cut cross-entropy: logits never materialised
  optimizer,
  grad_accumulate,     // a data-parallel wrapper's gradient accumulation (dp_copies.hpp)
  dp_copy,             // a data-parallel wrapper's copy or cast around its collectives (dp_copies.hpp)
  // host copies (copy stream)
  swap_out,
  swap_in,
  // communication (comm stream)
  all_gather,
  reduce_scatter,
  all_reduce,
  all_to_all,
  send,
  recv,
  // host CPU work (parallel.fsdp.offload): runs on the compute queue, which waits for it
  host_optimizer,
};
inline constexpr int kNumOpKinds = 38;

enum class Phase : uint8_t { fwd, bwd, recompute, optimizer };
// Which of a routed op's rows it processes: all of them, or under local-first dispatch
// (overlap.moe_local_first) the assignments that stay on the rank or those that arrive from peers.
enum class RoutingPart : uint8_t { all, local, remote };

// The expected rows of `part` out of a micro-batch's `assignments` (tokens x top_k) over an EP
// group of `ep`: the local part is the rank's own 1/ep share (rounded down), the remote part the
// rest. The graph builds routed ops at these sizes; the engine rescales them by the sampled rows.
constexpr int64_t routed_part_rows(int64_t assignments, int64_t ep, RoutingPart part) {
  const int64_t local = assignments / (ep > 0 ? ep : 1);
  return part == RoutingPart::all ? assignments : part == RoutingPart::local ? local : assignments - local;
}

enum class Stream : uint8_t { compute, comm, copy };

constexpr bool is_collective(OpKind k) {
  return k == OpKind::all_gather || k == OpKind::reduce_scatter || k == OpKind::all_reduce ||
         k == OpKind::all_to_all;
}
constexpr bool is_p2p(OpKind k) { return k == OpKind::send || k == OpKind::recv; }
constexpr bool is_communication(OpKind k) { return is_collective(k) || is_p2p(k); }

// FLOPs that count as model FLOPs (matmuls, attention cores, convolutions); elementwise work,
// norms and the optimizer do not (the usual MFU convention).
constexpr bool counts_as_model_flops(OpKind k) {
  switch (k) {
    case OpKind::gemm:
    case OpKind::lora_gemm:
    case OpKind::grouped_gemm:
    case OpKind::router:
    case OpKind::short_conv:
    case OpKind::flash_attention:
    case OpKind::kda:
    case OpKind::kda_intra_chunk:
    case OpKind::kda_inter_chunk:
    case OpKind::kda_output:
    case OpKind::dsa_indexer:
    case OpKind::indexer_score:
    case OpKind::sparse_attention:
    case OpKind::cce_loss: return true;
    case OpKind::embedding:
    case OpKind::norm:
    case OpKind::activation:
    case OpKind::elementwise:
    case OpKind::permute:
    case OpKind::unpermute:
    case OpKind::kda_gate_cumsum:
    case OpKind::kda_state_correction:
    case OpKind::topk:
    case OpKind::kv_gather:
    case OpKind::attention_residual:
    case OpKind::cross_entropy:
    case OpKind::optimizer:
    case OpKind::grad_accumulate:
    case OpKind::dp_copy:
    case OpKind::swap_out:
    case OpKind::swap_in:
    case OpKind::all_gather:
    case OpKind::reduce_scatter:
    case OpKind::all_reduce:
    case OpKind::all_to_all:
    case OpKind::send:
    case OpKind::recv:
    case OpKind::host_optimizer: return false;
  }
  return false;  // unreachable: every OpKind is listed above
}

enum class MemAction : uint8_t {
  alloc,      // HBM, at the op's start
  free,       // HBM, at the op's end
  to_host,    // swap out: DDR allocated at start, HBM freed at end
  to_device,  // swap in: HBM allocated at start, DDR freed at end
};

// step_grads: the parameter gradients under training.gradient_memory per_step (persistent
// otherwise, Program::persistent.grads).
enum class MemCategory : uint8_t { activation, gradient, gathered_params, unsharded_grads, logits, comm_buffer, workspace, step_grads };

// A transient buffer of a program (persistent state is accounted per program, not per op).
struct Buffer {
  double bytes = 0;
  MemCategory category = MemCategory::activation;
  uint32_t name = 0;  // index into Program::names
};

struct MemEffect {
  uint32_t buffer = 0;
  MemAction action = MemAction::alloc;
};

// A count of elements (or of multiply-adds) as a product of sizes, computed in double: equal to
// the int64 product while that is below 2^53 (every partial product is exact), and no overflow
// for sizes at moesim's input limits, where tokens x heads x keys passes 2^63.
template <typename... Sizes>
constexpr double elements(Sizes... sizes) {
  return (1.0 * ... * static_cast<double>(sizes));
}

struct TensorDesc {
  std::array<int64_t, 4> shape{};  // unused trailing dims are 0
  Dtype dtype = Dtype::bf16;

  // The element count, for tensors that can exist (the executor allocates them); a shape built
  // from inputs at moesim's limits may exceed int64, which bytes() does not mind.
  int64_t num_elements() const {
    int64_t n = 1;
    for (int64_t s : shape) {
      if (s > 0) n *= s;
    }
    return n;
  }
  // As elements() counts: the same as num_elements() while below 2^53, and no overflow beyond.
  double bytes() const {
    double n = 1;
    for (int64_t s : shape) {
      if (s > 0) n *= static_cast<double>(s);
    }
    return n * dtype_bytes(dtype);
  }
};

struct Op {
  OpKind kind = OpKind::elementwise;
  Phase phase = Phase::fwd;
  Stream stream = Stream::compute;
  Dtype dtype = Dtype::bf16;       // compute format (selects the device peak)
  GroupKind group = GroupKind::tp;  // communication ops only
  int32_t peer_offset = 0;          // send / recv: the peer's position in `group` minus this rank's
                                    // (+1 next, -1 previous; interleaved 1F1B wraps with +-(pp - 1))
  bool trainable_weight = false;    // the op's weight receives a gradient (gemms)
  int32_t layer = 0;                // 1-based model layer; 0 embedding, num_layers + 1 head and loss
  int32_t micro = -1;               // micro-batch, -1 for per-step ops
  int32_t routing_layer = -1;       // MoE layer whose routing sets this op's sizes, -1 if none
  RoutingPart routing_part = RoutingPart::all;  // routed ops: the rows it takes of the layer's
  uint32_t name = 0;                // index into Program::names
  double flops = 0;
  double bytes_read = 0;            // HBM traffic
  double bytes_written = 0;
  double cast_bytes = 0;            // quantised matmuls: HBM traffic of the kernels that cast their
                                    // operands (graph/quantize_casts.hpp), counted in num_kernels;
                                    // memory-bound kernels of their own, so their time adds
  double comm_bytes = 0;            // collectives: nccl-tests "size" on this rank; p2p: bytes sent or
                                    // received; swap copies: bytes copied
  int64_t m = 0, n = 0, k = 0;      // GEMM shape (grouped: m is the total rows); a norm's k: the
                                    // width of the rows it normalises (a head for QK-norm)
  int32_t num_groups = 0;           // grouped GEMM: experts on this rank
  int32_t num_kernels = 1;          // kernels it launches (an eager norm: several; each pays the launch
                                    // overhead; bytes_read / bytes_written are their sum)
  uint32_t first_tensor = 0;        // inputs then outputs, in Program::tensors
  uint16_t num_inputs = 0;
  uint16_t num_outputs = 0;
  uint32_t first_effect = 0;        // in Program::effects
  uint32_t num_effects = 0;
  uint32_t first_dep = 0;           // predecessors in Program::deps (besides stream order)
  uint32_t num_deps = 0;
};

template <>
struct EnumNames<OpKind> {
  static constexpr std::array<std::pair<std::string_view, OpKind>, kNumOpKinds> names{{
      {"embedding", OpKind::embedding},
      {"norm", OpKind::norm},
      {"gemm", OpKind::gemm},
      {"lora_gemm", OpKind::lora_gemm},
      {"grouped_gemm", OpKind::grouped_gemm},
      {"activation", OpKind::activation},
      {"elementwise", OpKind::elementwise},
      {"short_conv", OpKind::short_conv},
      {"router", OpKind::router},
      {"permute", OpKind::permute},
      {"unpermute", OpKind::unpermute},
      {"flash_attention", OpKind::flash_attention},
      {"kda", OpKind::kda},
      {"kda_gate_cumsum", OpKind::kda_gate_cumsum},
      {"kda_intra_chunk", OpKind::kda_intra_chunk},
      {"kda_inter_chunk", OpKind::kda_inter_chunk},
      {"kda_output", OpKind::kda_output},
      {"kda_state_correction", OpKind::kda_state_correction},
      {"dsa_indexer", OpKind::dsa_indexer},
      {"indexer_score", OpKind::indexer_score},
      {"topk", OpKind::topk},
      {"kv_gather", OpKind::kv_gather},
      {"sparse_attention", OpKind::sparse_attention},
      {"attention_residual", OpKind::attention_residual},
      {"cross_entropy", OpKind::cross_entropy},
      {"cce_loss", OpKind::cce_loss},
      {"optimizer", OpKind::optimizer},
      {"grad_accumulate", OpKind::grad_accumulate},
      {"dp_copy", OpKind::dp_copy},
      {"swap_out", OpKind::swap_out},
      {"swap_in", OpKind::swap_in},
      {"all_gather", OpKind::all_gather},
      {"reduce_scatter", OpKind::reduce_scatter},
      {"all_reduce", OpKind::all_reduce},
      {"all_to_all", OpKind::all_to_all},
      {"send", OpKind::send},
      {"recv", OpKind::recv},
      {"host_optimizer", OpKind::host_optimizer},
  }};
};
template <>
struct EnumNames<Phase> {
  static constexpr std::array<std::pair<std::string_view, Phase>, 4> names{{
      {"fwd", Phase::fwd}, {"bwd", Phase::bwd}, {"recompute", Phase::recompute}, {"optimizer", Phase::optimizer}}};
};
template <>
struct EnumNames<RoutingPart> {
  static constexpr std::array<std::pair<std::string_view, RoutingPart>, 3> names{{
      {"all", RoutingPart::all}, {"local", RoutingPart::local}, {"remote", RoutingPart::remote}}};
};
template <>
struct EnumNames<Stream> {
  static constexpr std::array<std::pair<std::string_view, Stream>, 3> names{{
      {"compute", Stream::compute}, {"comm", Stream::comm}, {"copy", Stream::copy}}};
};
template <>
struct EnumNames<MemAction> {
  static constexpr std::array<std::pair<std::string_view, MemAction>, 4> names{{
      {"alloc", MemAction::alloc}, {"free", MemAction::free}, {"to_host", MemAction::to_host},
      {"to_device", MemAction::to_device}}};
};
template <>
struct EnumNames<MemCategory> {
  static constexpr std::array<std::pair<std::string_view, MemCategory>, 8> names{{
      {"activation", MemCategory::activation},
      {"gradient", MemCategory::gradient},
      {"gathered_params", MemCategory::gathered_params},
      {"unsharded_grads", MemCategory::unsharded_grads},
      {"logits", MemCategory::logits},
      {"comm_buffer", MemCategory::comm_buffer},
      {"workspace", MemCategory::workspace},
      {"step_grads", MemCategory::step_grads},
  }};
};

}  // namespace moesim
