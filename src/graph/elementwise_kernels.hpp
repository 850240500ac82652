// SPDX-License-Identifier: MIT
// How many kernels the memory-bound ops around the matmuls launch, and how many HBM bytes they
// move, under each way of running them (fused_ops.elementwise): a hand-written kernel per op,
// torch.compile's generated kernels, or PyTorch eager's decomposition into ATen ops that each read
// and write whole tensors. docs/modelling.md#elementwise-execution derives every row.
//
// Work is per element of the op's reference tensor: a norm's input (rows x width), a gated
// activation's output (rows x f, its input is twice as wide), RoPE's query and key together.
// Intermediates in FP32 are 4 bytes whatever the activation format.
#pragma once

#include <optional>

#include "core/dtype.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

// gated_activation: the gate and up halves as one tensor (one GEMM of both, Megatron's linear_fc1);
// gated_activation_apart: two tensors (two GEMMs, torchtitan's w1 and w3).
enum class ElementwiseForm { rms_norm, layer_norm, gated_activation, gated_activation_apart, activation, rope };

// One pass (forward or backward) of an op: kernels launched, HBM bytes per reference element.
struct KernelPass {
  int num_kernels = 1;
  double read_per_element = 0;
  double written_per_element = 0;
};

struct ElementwiseWork {
  KernelPass fwd;
  KernelPass bwd;
  // A copy of the reference tensor, in this format, kept from forward to backward besides what the
  // hand-fused op keeps (eager: a composite RMSNorm's FP32 input, a gated activation's silu output).
  std::optional<Dtype> kept_copy;
};

// The work of `form` under `ops` (its elementwise mode, and under eager the RMSNorm and RoPE forms).
ElementwiseWork elementwise_work(ElementwiseForm form, const FusedOpsSpec& ops, Dtype act);

}  // namespace moesim
