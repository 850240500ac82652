// SPDX-License-Identifier: MIT
// The kernels that cast a linear layer's operands to the compute format when it is 8 bits or
// fewer, and the HBM bytes they move, under each scaling recipe (precision.quantization).
// docs/modelling.md#fp8-casts derives every row from torchao's float8 roofline.
//
// A linear y = x W^T runs three matmuls: y = x W^T, dx = dy W and dW = dy^T x. Hopper's FP8
// tensor cores take both operands K-major, so every operand is needed in two layouts: x and dy
// row- and column-major, W as it is and transposed. Work is per element of the operand; the
// operand is read in its unquantised format and written in the compute format.
#pragma once

#include "core/dtype.hpp"
#include "graph/elementwise_kernels.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

enum class CastOperand {
  activation,  // the layer input x (cast in forward) or the output gradient dy (in backward)
  weight,      // W: cast for the forward and again, transposed, for the input gradient
};

// The casts of one operand: the forward's kernels and the backward's (an activation is cast in
// the pass that produces it, so all its work is in `fwd`, whichever pass that is).
struct CastWork {
  KernelPass fwd{0, 0, 0};
  KernelPass bwd{0, 0, 0};
};

// The casts of `operand` from `from` to `to` under `recipe`; none when `to` has 16 bits or more.
CastWork cast_work(QuantizationCasts recipe, CastOperand operand, Dtype from, Dtype to);

}  // namespace moesim
