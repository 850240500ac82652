// SPDX-License-Identifier: MIT
#include "graph/quantize_casts.hpp"

namespace moesim {

namespace {
constexpr KernelPass kNone{0, 0, 0};
}  // namespace

CastWork cast_work(QuantizationCasts recipe, CastOperand operand, Dtype from, Dtype to) {
  if (dtype_bytes(to) >= 2) return {};
  const double a = dtype_bytes(from);  // read: the unquantised operand
  const double q = dtype_bytes(to);    // written: one layout in the compute format
  const bool act = operand == CastOperand::activation;
  switch (recipe) {
    case QuantizationCasts::fused: return {};
    case QuantizationCasts::tensorwise:
      // A scale per tensor needs the tensor's max |x| before any element is cast: a two-stage
      // reduction (the second stage's traffic is negligible), then the cast. An activation's cast
      // writes both layouts at once; the weight's transposed cast waits for the backward.
      if (act) return {{3, 2 * a, 2 * q}, kNone};
      return {{3, 2 * a, q}, {1, a, q}};
    case QuantizationCasts::rowwise:
      // Row scales along each layout's K: one kernel casts row-major and writes a transposed
      // unquantised copy, a second casts that copy. The weight's transpose and cast are the
      // backward's.
      if (act) return {{2, 2 * a, 2 * q + a}, kNone};
      return {{1, a, q}, {2, 2 * a, a + q}};
    case QuantizationCasts::one_pass:
      // Block scales (MXFP8, 1x128 / 128x128 blockwise) or a scale known in advance (delayed
      // scaling): one read writes both layouts. The block scales (one byte per 32 elements at
      // most) are left out.
      if (act) return {{1, a, 2 * q}, kNone};
      return {{1, a, q}, {1, a, q}};
  }
  return {};
}

}  // namespace moesim
