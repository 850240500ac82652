// SPDX-License-Identifier: MIT
#include "graph/loss_ops.hpp"

#include <algorithm>
#include <string>

namespace moesim {
namespace {

struct Shape {
  int64_t tokens;
  int64_t d;
  int64_t vocab;  // per TP rank (vocabulary-parallel head)
  bool trainable;
};

Shape shape_of(const LayerContext& c) {
  const int64_t v = (c.model->vocab_size + c.tp - 1) / c.tp;
  return {c.tokens, c.model->hidden_size, v, c.train_base || c.lora_on(LoraTarget::lm_head)};
}

Op base(OpKind kind, Phase phase, const LayerContext& c, int32_t micro) {
  Op op;
  op.kind = kind;
  op.phase = phase;
  op.dtype = c.unquantized;
  op.layer = static_cast<int32_t>(c.model->num_layers + 1);
  op.micro = micro;
  return op;
}

Op head_gemm(Phase phase, const LayerContext& c, int32_t micro, int64_t rows, const Shape& s) {
  Op op = base(OpKind::gemm, phase, c, micro);
  op.m = rows;
  op.n = s.vocab;
  op.k = s.d;
  op.flops = 2.0 * elements(rows, s.d, s.vocab);
  op.bytes_read = elements(rows, s.d) * dtype_bytes(c.act) + elements(s.d, s.vocab) * dtype_bytes(c.unquantized);
  op.bytes_written = elements(rows, s.vocab) * 4.0;
  op.trainable_weight = s.trainable;
  return op;
}

// The softmax statistics of vocabulary-parallel cross-entropy are summed over the TP group.
void tp_statistics(ProgramWriter& w, const LayerContext& c, const TapePolicy& policy, int32_t micro, int64_t rows,
                   uint32_t after) {
  if (c.tp == 1) return;
  Op ar = base(OpKind::all_reduce, Phase::fwd, c, micro);
  ar.group = GroupKind::tp;
  ar.stream = policy.comm_on_compute_stream ? Stream::compute : Stream::comm;
  ar.comm_bytes = static_cast<double>(rows) * 2 * 4.0;  // max and sum of exp, fp32
  const uint32_t i = w.add(ar, "loss.tp_softmax_stats");
  w.order_after(i, after);
}

// PyTorch's F.cross_entropy(logits.float(), labels) on the head's BF16 logits, per logit (a: bytes
// of the activation format):
//   forward   the cast (a -> 4), log_softmax (4 -> 4, saved for backward), nll_loss (a gather):
//             3 kernels. log_softmax holds a row in shared memory when it fits (one read of the
//             input); a longer row (ATen's cunn_SoftMaxForward) is read three times: its max, its
//             sum of exponentials, then the output (kSoftmaxRowInSharedMemory). The BF16 logits
//             and the FP32 copy die with the call (torchtitan drops its reference to the logits
//             before backward), so at most a + 8 bytes live, 4 after.
//   backward  a zero-fill (-> 4) and nll_loss_backward's scatter, log_softmax_backward (8 -> 4),
//             the cast back (4 -> a): 4 kernels. The saved log-probabilities, the NLL gradient and
//             the log-softmax gradient live together (12 bytes); the cast's BF16 output comes after
//             the first two are freed, so it is counted from lm_head.bwd, its reader.
// The harness (tools/trace_harness) measures these kernels on an H200 (docs/calibration/from-trace.md).
// The longest FP32 row ATen's softmax keeps in shared memory: Hopper's 227 KiB per block. A100's is
// 163 KiB, so GPT-3's 50,257 classes (196 KiB) would read three times there; no shipped scenario
// runs that model with the eager loss, and the other shipped vocabularies (32,000-32,768 and
// 128,256-250,880) fall on the same side of both.
constexpr double kSoftmaxRowInSharedMemory = 227.0 * 1024;

LossState eager_forward(ProgramWriter& w, const LayerContext& c, const TapePolicy& policy, int32_t micro, LossState st,
                        const TensorDesc& x_desc, const Shape& s) {
  const double n = elements(s.tokens, s.vocab);
  const double a = dtype_bytes(c.act);
  const TensorDesc logits{{s.tokens, s.vocab, 0, 0}, c.act};
  Op head = head_gemm(Phase::fwd, c, micro, s.tokens, s);
  head.bytes_written = n * a;
  const uint32_t g = w.add(head, "lm_head", std::span(&x_desc, 1), std::span(&logits, 1));
  w.order_after(g, st.x_producer);
  const uint32_t lb = w.buffer(logits.bytes(), MemCategory::logits, "loss.logits");
  w.effect(g, lb, MemAction::alloc);
  tp_statistics(w, c, policy, micro, s.tokens, g);
  Op ce = base(OpKind::cross_entropy, Phase::fwd, c, micro);
  ce.dtype = Dtype::fp32;
  ce.num_kernels = 3;
  ce.flops = 4.0 * n;
  const double softmax_reads = static_cast<double>(s.vocab) * 4.0 <= kSoftmaxRowInSharedMemory ? 1 : 3;
  ce.bytes_read = n * (a + 4.0 * softmax_reads) + static_cast<double>(s.tokens) * 4.0;
  ce.bytes_written = n * 8.0 + static_cast<double>(s.tokens) * 4.0;
  st.last_forward_op = w.add(ce, "loss.cross_entropy", std::span(&logits, 1));
  const uint32_t copy = w.buffer(n * 4.0, MemCategory::logits, "loss.logits_fp32");
  const uint32_t log_probs = w.buffer(n * 4.0, MemCategory::logits, "loss.log_probs");
  w.effect(st.last_forward_op, copy, MemAction::alloc);
  w.effect(st.last_forward_op, log_probs, MemAction::alloc);
  w.effect(st.last_forward_op, copy, MemAction::free);
  w.effect(st.last_forward_op, lb, MemAction::free);
  st.saved.push_back(log_probs);
  return st;
}

std::pair<uint32_t, uint32_t> eager_backward(ProgramWriter& w, const LayerContext& c, int32_t micro, const LossState& st,
                                             uint32_t dx, const TensorDesc& x_desc, const Shape& s) {
  const double n = elements(s.tokens, s.vocab);
  const double a = dtype_bytes(c.act);
  const TensorDesc log_probs{{s.tokens, s.vocab, 0, 0}, Dtype::fp32};
  const TensorDesc grad{{s.tokens, s.vocab, 0, 0}, c.act};
  Op ce = base(OpKind::cross_entropy, Phase::bwd, c, micro);
  ce.dtype = Dtype::fp32;
  ce.num_kernels = 4;
  ce.flops = 2.0 * n;
  ce.bytes_read = n * 12.0;
  ce.bytes_written = n * (8.0 + a);
  const uint32_t ci = w.add(ce, "loss.cross_entropy.bwd", std::span(&log_probs, 1), std::span(&grad, 1));
  const uint32_t fp32_grads = w.buffer(n * 8.0, MemCategory::logits, "loss.logits_fp32_grads");
  w.effect(ci, fp32_grads, MemAction::alloc);
  w.effect(ci, fp32_grads, MemAction::free);
  for (uint32_t b : st.saved) w.effect(ci, b, MemAction::free);
  Op g = head_gemm(Phase::bwd, c, micro, s.tokens, s);
  g.flops = 2.0 * elements(s.tokens, s.d, s.vocab) * (s.trainable ? 2 : 1);
  g.bytes_written = x_desc.bytes();
  const uint32_t gi = w.add(g, "lm_head.bwd", std::span(&grad, 1), std::span(&x_desc, 1));
  const uint32_t gb = w.buffer(grad.bytes(), MemCategory::logits, "loss.logits_grad");
  w.effect(gi, gb, MemAction::alloc);
  w.effect(gi, gb, MemAction::free);
  w.effect(gi, dx, MemAction::alloc);
  w.effect(gi, st.x_buffer, MemAction::free);
  return {dx, gi};
}

}  // namespace

LossState emit_loss_forward(ProgramWriter& w, const LayerContext& c, const TapePolicy& policy, int32_t micro,
                            uint32_t x_buffer, uint32_t x_producer) {
  const Shape s = shape_of(c);
  const LossKind kind = c.scenario->loss.kind;
  LossState st{x_buffer, x_producer, {}, 0};
  auto depend_on_x = [&](uint32_t op) {
    w.order_after(op, x_producer);
  };
  const TensorDesc x_desc{{s.tokens, s.d, 0, 0}, c.act};
  if (kind == LossKind::full && c.scenario->loss.implementation == LossImplementation::eager) {
    return eager_forward(w, c, policy, micro, st, x_desc, s);
  }
  if (kind == LossKind::full) {
    const TensorDesc logits{{s.tokens, s.vocab, 0, 0}, Dtype::fp32};
    const uint32_t g = w.add(head_gemm(Phase::fwd, c, micro, s.tokens, s), "lm_head", std::span(&x_desc, 1),
                             std::span(&logits, 1));
    depend_on_x(g);
    const uint32_t lb = w.buffer(logits.bytes(), MemCategory::logits, "loss.logits");
    w.effect(g, lb, MemAction::alloc);
    tp_statistics(w, c, policy, micro, s.tokens, g);
    Op ce = base(OpKind::cross_entropy, Phase::fwd, c, micro);
    ce.dtype = Dtype::fp32;
    ce.flops = 4.0 * elements(s.tokens, s.vocab);
    ce.bytes_read = logits.bytes();
    ce.bytes_written = static_cast<double>(s.tokens) * 4.0;
    st.last_forward_op = w.add(ce, "loss.cross_entropy", std::span(&logits, 1));
    st.saved.push_back(lb);
    return st;
  }
  if (kind == LossKind::chunked) {
    const int64_t chunk = std::min(c.scenario->loss.chunk_tokens, s.tokens);
    for (int64_t start = 0, j = 0; start < s.tokens; start += chunk, ++j) {
      const int64_t rows = std::min(chunk, s.tokens - start);
      const TensorDesc logits{{rows, s.vocab, 0, 0}, Dtype::fp32};
      const uint32_t g = w.add(head_gemm(Phase::fwd, c, micro, rows, s), "lm_head.chunk" + std::to_string(j),
                               std::span(&x_desc, 1), std::span(&logits, 1));
      depend_on_x(g);
      const uint32_t lb = w.buffer(logits.bytes(), MemCategory::logits, "loss.logits_chunk");
      w.effect(g, lb, MemAction::alloc);
      tp_statistics(w, c, policy, micro, rows, g);
      Op ce = base(OpKind::cross_entropy, Phase::fwd, c, micro);
      ce.dtype = Dtype::fp32;
      ce.flops = 4.0 * elements(rows, s.vocab);
      ce.bytes_read = logits.bytes();
      ce.bytes_written = static_cast<double>(rows) * 4.0;
      st.last_forward_op = w.add(ce, "loss.cross_entropy.chunk" + std::to_string(j), std::span(&logits, 1));
      w.effect(st.last_forward_op, lb, MemAction::free);
    }
    return st;
  }
  // cce
  Op op = head_gemm(Phase::fwd, c, micro, s.tokens, s);
  op.kind = OpKind::cce_loss;
  op.bytes_written = static_cast<double>(s.tokens) * 4.0;  // log-sum-exp only
  op.num_groups = static_cast<int32_t>((s.vocab + c.scenario->loss.vocab_chunk - 1) / c.scenario->loss.vocab_chunk);
  st.last_forward_op = w.add(op, "loss.cce", std::span(&x_desc, 1));
  depend_on_x(st.last_forward_op);
  tp_statistics(w, c, policy, micro, s.tokens, st.last_forward_op);
  return st;
}

std::pair<uint32_t, uint32_t> emit_loss_backward(ProgramWriter& w, const LayerContext& c, const TapePolicy& policy,
                                                 int32_t micro, const LossState& st) {
  (void)policy;
  const Shape s = shape_of(c);
  const LossKind kind = c.scenario->loss.kind;
  const TensorDesc x_desc{{s.tokens, s.d, 0, 0}, c.act};
  const uint32_t dx = w.buffer(x_desc.bytes(), MemCategory::gradient, "loss.grad_x");
  const double gemm_flops = 2.0 * elements(s.tokens, s.d, s.vocab);
  if (kind == LossKind::full && c.scenario->loss.implementation == LossImplementation::eager) {
    return eager_backward(w, c, micro, st, dx, x_desc, s);
  }
  if (kind == LossKind::full) {
    const TensorDesc logits{{s.tokens, s.vocab, 0, 0}, Dtype::fp32};
    Op ce = base(OpKind::cross_entropy, Phase::bwd, c, micro);
    ce.dtype = Dtype::fp32;
    ce.flops = 2.0 * elements(s.tokens, s.vocab);
    ce.bytes_read = logits.bytes();
    ce.bytes_written = logits.bytes();  // the logits gradient overwrites the logits
    w.add(ce, "loss.cross_entropy.bwd", std::span(&logits, 1), std::span(&logits, 1));
    Op g = head_gemm(Phase::bwd, c, micro, s.tokens, s);
    g.flops = gemm_flops * (s.trainable ? 2 : 1);
    g.bytes_written = x_desc.bytes();
    const uint32_t gi = w.add(g, "lm_head.bwd", std::span(&logits, 1), std::span(&x_desc, 1));
    w.effect(gi, dx, MemAction::alloc);
    for (uint32_t b : st.saved) w.effect(gi, b, MemAction::free);
    w.effect(gi, st.x_buffer, MemAction::free);
    return {dx, gi};
  }
  if (kind == LossKind::chunked) {
    const int64_t chunk = std::min(c.scenario->loss.chunk_tokens, s.tokens);
    uint32_t last = 0;
    for (int64_t start = 0, j = 0; start < s.tokens; start += chunk, ++j) {
      const int64_t rows = std::min(chunk, s.tokens - start);
      const TensorDesc logits{{rows, s.vocab, 0, 0}, Dtype::fp32};
      const uint32_t r = w.add(head_gemm(Phase::recompute, c, micro, rows, s), "lm_head.chunk" + std::to_string(j),
                               std::span(&x_desc, 1), std::span(&logits, 1));
      const uint32_t lb = w.buffer(logits.bytes(), MemCategory::logits, "loss.logits_chunk.recompute");
      w.effect(r, lb, MemAction::alloc);
      if (j == 0) w.effect(r, dx, MemAction::alloc);
      Op ce = base(OpKind::cross_entropy, Phase::bwd, c, micro);
      ce.dtype = Dtype::fp32;
      ce.flops = 6.0 * elements(rows, s.vocab);
      ce.bytes_read = logits.bytes();
      ce.bytes_written = logits.bytes();
      w.add(ce, "loss.cross_entropy.chunk" + std::to_string(j) + ".bwd", std::span(&logits, 1), std::span(&logits, 1));
      Op g = head_gemm(Phase::bwd, c, micro, rows, s);
      g.flops = 2.0 * elements(rows, s.d, s.vocab) * (s.trainable ? 2 : 1);
      last = w.add(g, "lm_head.chunk" + std::to_string(j) + ".bwd", std::span(&logits, 1), std::span(&x_desc, 1));
      w.effect(last, lb, MemAction::free);
    }
    w.effect(last, st.x_buffer, MemAction::free);
    return {dx, last};
  }
  // cce: logits recomputed blockwise (one kernel with the backward; two ops here so that the
  // recomputation is not counted as model FLOPs), then the input (and weight) gradients.
  const auto blocks = static_cast<int32_t>((s.vocab + c.scenario->loss.vocab_chunk - 1) / c.scenario->loss.vocab_chunk);
  Op re = head_gemm(Phase::recompute, c, micro, s.tokens, s);
  re.kind = OpKind::cce_loss;
  re.bytes_written = 0;
  re.num_groups = blocks;
  w.add(re, "loss.cce.recompute", std::span(&x_desc, 1));
  Op op = head_gemm(Phase::bwd, c, micro, s.tokens, s);
  op.kind = OpKind::cce_loss;
  op.flops = gemm_flops * (s.trainable ? 2 : 1);
  op.bytes_written = x_desc.bytes();
  op.num_groups = blocks;
  const uint32_t i = w.add(op, "loss.cce.bwd", std::span(&x_desc, 1), std::span(&x_desc, 1));
  w.effect(i, dx, MemAction::alloc);
  w.effect(i, st.x_buffer, MemAction::free);
  return {dx, i};
}

}  // namespace moesim
