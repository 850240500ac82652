// SPDX-License-Identifier: MIT
// Shared vocabulary of the attention kernels: the cost record (FLOPs and bytes) each kernel reports
// for the calibrator and the causal pair count the simulator's graph uses (timing: timer.hpp).
//
// Conventions for every kernel in this folder:
// - tensors are row-major, batch outermost: [batch, seq, heads, dim] unless a header says otherwise;
// - BF16 tensors are passed as bf16_bits (the bit layout of __nv_bfloat16), FP32 as float;
// - forward outputs are BF16 (softmax log-sum-exp and the like FP32); gradients are FP32, because
//   several are accumulated with atomics across blocks (the caller casts if it wants BF16);
// - launchers take device pointers and a stream, enqueue only, and throw BackendError (check.hpp)
//   on a bad launch or std::invalid_argument on a shape the kernel does not support.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/bf16.hpp"

namespace moesim::cuda {

// Kernel variants where a launcher has more than one: the straightforward FP32-SIMT kernel (kept
// as a second reference and a fallback) and the tensor-core one (the default).
enum class AttentionImpl { simt, tensor_core };

// What one launch does, in the units the calibrator compares against peaks. `flops` follows the
// simulator's formulas (docs/modelling.md and src/graph/attention_ops.cpp), not the kernel's actual
// instruction count (a recomputing backward does more); `bytes` is the minimum traffic: every
// input read once, every output written once, workspaces not counted.
struct KernelCost {
  double flops = 0;
  double bytes = 0;
};

// Sum over queries t = 0..seq-1 of min(t + 1, limit): the number of (query, key) pairs causal
// attention visits when each query keeps at most `limit` keys (limit >= seq: all earlier keys).
// The same closed form as mean_causal_keys() in src/model/accounting.cpp, times seq.
inline double causal_pairs(int64_t seq, int64_t limit) {
  const double n = static_cast<double>(seq);
  const double k = static_cast<double>(limit);
  if (seq <= limit) return n * (n + 1) / 2;
  return k * (k + 1) / 2 + (n - k) * k;
}

}  // namespace moesim::cuda
