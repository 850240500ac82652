// SPDX-License-Identifier: MIT
// One op of a step graph timed through the executor's own launch (launch_op), as calibrate's
// attention and loss tables measure their kinds: a dry launch sizes the op's operands, buffers of
// that size are filled with uniform random values, then the live launch is timed.
#pragma once

#include <cstddef>
#include <cstdint>

#include "backend/cuda/op_kernels.hpp"
#include "backend/cuda/timer.hpp"

namespace moesim::cuda {

struct LaunchTiming {
  Timing timing;
  size_t operand_bytes = 0;  // what the dry launch drew from its input and output arenas
};

// `live` says what the live launch reads besides its arenas (graph, model, rank, stream, GEMM
// handle, index tables); the dry launch gets its graph, model and rank only. `seed` and seed + 1
// fill the input and output buffers.
LaunchTiming time_launch(const OpEnv& live, const Program& p, uint32_t op, uint64_t seed, int warmup, int repeats);

}  // namespace moesim::cuda
