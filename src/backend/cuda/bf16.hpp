// SPDX-License-Identifier: MIT
// The backend's one spelling of BF16: `bf16_bits`, the bit pattern as a 16-bit integer (the layout
// of __nv_bfloat16), in every launcher, kernel, reference and test, host and device alike. On the
// host, float_to_bf16 / bf16_to_float convert with round-to-nearest-even as the GPU does; in
// kernels, kernels_common.cuh's detail::to_f / detail::to_bf. __nv_bfloat16 itself appears only
// where CUDA needs its type (the tensor-core tiles of the attention kernels). No CUDA
// headers here: the CPU references build without them.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace moesim::cuda {

using bf16_bits = uint16_t;

inline bf16_bits float_to_bf16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<bf16_bits>((u >> 16) | 0x40);  // stays a (quiet) NaN
  const uint32_t rounding = 0x7FFF + ((u >> 16) & 1);                   // to nearest, ties to even
  return static_cast<bf16_bits>((u + rounding) >> 16);
}
inline float bf16_to_float(bf16_bits b) { return std::bit_cast<float>(static_cast<uint32_t>(b) << 16); }
inline bf16_bits bf16_nan() { return 0x7FC0; }

// Unit roundoff of BF16 (8 significant bits): |round(x) - x| <= 2^-8 |x|.
inline constexpr double kBf16Eps = 1.0 / 256;
// Unit roundoff of FP32.
inline constexpr double kFp32Eps = 1.0 / 16777216;

}  // namespace moesim::cuda
