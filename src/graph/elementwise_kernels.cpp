// SPDX-License-Identifier: MIT
#include "graph/elementwise_kernels.hpp"

namespace moesim {

namespace {

constexpr double kFp32 = 4;  // bytes of an FP32 intermediate

// One kernel per op, each tensor read and written once: the hand-written kernels of Transformer
// Engine / Apex / Megatron-Core, and the work moesim has always costed. Backward reads what the
// forward read and wrote (inputs and the output gradient) and writes the input gradients.
ElementwiseWork hand_fused(ElementwiseForm form, double a) {
  switch (form) {
    case ElementwiseForm::rms_norm:
    case ElementwiseForm::layer_norm:
    case ElementwiseForm::activation: return {{1, a, a}, {1, 2 * a, a}, {}};
    case ElementwiseForm::gated_activation:
    case ElementwiseForm::gated_activation_apart: return {{1, 2 * a, a}, {1, 3 * a, 2 * a}, {}};
    case ElementwiseForm::rope: return {{0, 0, 0}, {0, 0, 0}, {}};  // inside the attention input: no op of its own
  }
  return {};
}

// A norm's backward as two kernels (ATen's layer_norm / rms_norm backward, Inductor's): the input
// gradient reads the output gradient and the input; the weight gradient, a reduction over rows,
// reads both again.
constexpr KernelPass kNormBackwardTwoKernels(double a) { return {2, 4 * a, a}; }

ElementwiseWork compiled(ElementwiseForm form, double a) {
  switch (form) {
    case ElementwiseForm::rms_norm:
    case ElementwiseForm::layer_norm: return {{1, a, a}, kNormBackwardTwoKernels(a), {}};
    case ElementwiseForm::activation:
    case ElementwiseForm::gated_activation:
    case ElementwiseForm::gated_activation_apart: return hand_fused(form, a);
    // One generated kernel per tensor (query, key) each way; the reference element counts both.
    case ElementwiseForm::rope: return {{2, a, a}, {2, a, a}, {}};
  }
  return {};
}

ElementwiseWork eager(ElementwiseForm form, const FusedOpsSpec& ops, Dtype act) {
  const double a = dtype_bytes(act);
  switch (form) {
    case ElementwiseForm::layer_norm: return {{1, a, a}, kNormBackwardTwoKernels(a), {}};
    case ElementwiseForm::rms_norm:
      if (ops.eager_rms_norm == EagerRmsNorm::kernel) return {{1, a, a}, kNormBackwardTwoKernels(a), {}};
      // Composite: x32 = x.to(fp32); r = rsqrt(pow(x32, 2).mean(-1) + eps); y = (x32 * r).type_as(x) * w.
      // Forward kernels: cast (a -> 4), pow (4 -> 4), mean (4 ->), add and rsqrt (per row), mul
      // (4 -> 4), cast (4 -> a), mul by the weight (a -> a): 8 kernels.
      // Backward (autograd of each): g*w (a -> a); g*y and its row sum for the weight (2a -> a, a ->);
      // cast (a -> 4); g*r (4 -> 4); g*x32 and its row sum for r (8 -> 4, 4 ->); rsqrt's (per row);
      // mean's expand-divide (-> 4); pow's 2*x*g (8 -> 4, 4 -> 4); the two gradients of x32 added
      // (8 -> 4); cast back (4 -> a): 13 kernels. Kept: x32 (4 bytes) beside y (a) instead of x.
      return {{8, 4 * kFp32 + 2 * a, 3 * kFp32 + 2 * a}, {13, 10 * kFp32 + 5 * a, 7 * kFp32 + 3 * a}, Dtype::fp32};
    case ElementwiseForm::activation: return hand_fused(form, a);  // gelu / gelu_backward: one kernel each
    case ElementwiseForm::gated_activation:
      // silu(gate) (a -> a), * up (2a -> a); backward: g*s and g*up (2a -> a each), silu_backward
      // (2a -> a), and the split's backward concatenating the two halves (2a -> 2a). The silu
      // output is kept for the multiply's backward.
      return {{2, 3 * a, 2 * a}, {4, 8 * a, 5 * a}, act};
    case ElementwiseForm::gated_activation_apart:
      // The same forward on two tensors; backward g*s (the up gradient), g*up and silu_backward
      // (the gate gradient), 2a -> a each, and no split to undo: 3 kernels. (The H100 llama8b
      // trace, tests/data/traces/2026-12-05-h100: 2.74 ms measured where the
      // concatenating form above predicted 4.19, about its 9 / 13 of the bytes.)
      return {{2, 3 * a, 2 * a}, {3, 6 * a, 3 * a}, act};
    case ElementwiseForm::rope:
      if (ops.eager_rope == EagerRope::complex) {
        // Per tensor: .float() (a -> 4), complex multiply by the frequencies (4 -> 4), .type_as()
        // (4 -> a); backward the same three in reverse.
        return {{6, a + 2 * kFp32, a + 2 * kFp32}, {6, a + 2 * kFp32, a + 2 * kFp32}, {}};
      }
      // Per tensor, on the even and odd halves x1, x2: x1*c, x2*s, x1*s, x2*c (a/2 -> a/2 each),
      // a subtract and an add (a -> a/2 each), the stack as two copies (a/2 -> a/2 each): 8 kernels.
      // Backward: four multiplies (a/2 -> a/2), the subtract's negation (a/2 -> a/2), two
      // accumulations (a -> a/2), per half a zero fill (-> a) and a strided copy (a/2 -> a/2), and
      // the halves' gradients added (2a -> a): 12 kernels.
      return {{16, 5 * a, 4 * a}, {24, 7.5 * a, 7.5 * a}, {}};
  }
  return {};
}

}  // namespace

ElementwiseWork elementwise_work(ElementwiseForm form, const FusedOpsSpec& ops, Dtype act) {
  switch (ops.elementwise) {
    case ElementwiseExecution::fused: return hand_fused(form, dtype_bytes(act));
    case ElementwiseExecution::compiled: return compiled(form, dtype_bytes(act));
    case ElementwiseExecution::eager: return eager(form, ops, act);
  }
  return {};
}

}  // namespace moesim
