// SPDX-License-Identifier: MIT
// Numeric formats of weights, activations, gradients and optimizer states.
#pragma once

#include <array>
#include <string_view>
#include <utility>

#include "core/enum_names.hpp"

namespace moesim {

enum class Dtype { fp32, tf32, bf16, fp16, fp8, int8, fp4, int4, int32 };

// Storage size of one element; tf32 is a compute format stored as fp32.
constexpr double dtype_bytes(Dtype d) {
  switch (d) {
    case Dtype::fp32:
    case Dtype::tf32:
    case Dtype::int32: return 4.0;
    case Dtype::bf16:
    case Dtype::fp16: return 2.0;
    case Dtype::fp8:
    case Dtype::int8: return 1.0;
    case Dtype::fp4:
    case Dtype::int4: return 0.5;
  }
  return 0.0;
}

template <>
struct EnumNames<Dtype> {
  static constexpr std::array<std::pair<std::string_view, Dtype>, 9> names{{
      {"fp32", Dtype::fp32},
      {"tf32", Dtype::tf32},
      {"bf16", Dtype::bf16},
      {"fp16", Dtype::fp16},
      {"fp8", Dtype::fp8},
      {"int8", Dtype::int8},
      {"fp4", Dtype::fp4},
      {"int4", Dtype::int4},
      {"int32", Dtype::int32},
  }};
};

}  // namespace moesim
