// SPDX-License-Identifier: MIT
// Physical limits on inputs: every numeric field declares bounds from these (fields.hpp), and the
// loaders refuse derived sizes (parameters, ranks, micro-batches, sweep configurations) beyond
// them before any work proportional to them starts. Each is far above any real system (a 10T-
// parameter model, a 1M-token context and 100k devices load) and far below where int64 products
// or doubles overflow. docs/limits.md lists them with the reasons.
#pragma once

#include <cstdint>
#include <optional>

namespace moesim::limits {

// JSON documents: nesting depth of objects and arrays (shipped files nest less than 10 deep).
inline constexpr int kMaxJsonDepth = 128;

// Model shape.
inline constexpr int64_t kMaxWidth = int64_t{1} << 20;       // hidden, FFN, head and rank dimensions
inline constexpr int64_t kMaxHeads = int64_t{1} << 16;       // attention heads of one kind
inline constexpr int64_t kMaxLayers = 10'000;                // transformer (and encoder) layers
inline constexpr int64_t kMaxVocab = int64_t{1} << 24;       // vocabulary entries
inline constexpr int64_t kMaxExperts = int64_t{1} << 20;     // routed experts per MoE layer (PEER: 1M)
inline constexpr int64_t kMaxSmall = 1024;                   // kernels, channels, shared experts, engines
inline constexpr double kMaxParams = 1e15;                   // a whole model (a 10T model is 1e13)

// Batch and plan.
inline constexpr int64_t kMaxSequence = int64_t{1} << 26;    // tokens per sequence (64M)
inline constexpr int64_t kMaxBatch = int64_t{1} << 30;       // sequences per step or micro-batch
inline constexpr int64_t kMaxTokensPerStep = int64_t{1} << 40;  // global batch x sequence length
inline constexpr int64_t kMaxDevices = int64_t{1} << 20;     // devices, and each parallel degree
inline constexpr int64_t kMaxVirtualStages = 1024;           // model chunks per pipeline stage
inline constexpr int64_t kMaxMicroBatches = int64_t{1} << 16;  // micro-batches per step
inline constexpr int64_t kMaxDispatchChunks = 64;           // expert all-to-all chunks per MoE layer
// Layer passes one rank's program holds: micro-batches x layers per stage (the graph's size).
inline constexpr int64_t kMaxLayerPasses = int64_t{1} << 20;
inline constexpr int64_t kMaxSampledSteps = 1000;            // routing re-samples (as --steps)
inline constexpr double kMaxSlowdown = 1000;                 // straggler factor
inline constexpr double kMaxSkew = 100;                      // Zipf exponent
inline constexpr double kMaxCapacityFactor = 1000;           // expert capacity, x the balanced load
inline constexpr double kMaxBiasUpdateSpeed = 10;            // routing bias step, log-popularity units
inline constexpr int64_t kMaxBiasStartStep = 10000;          // bias updates iterated before step 0 (~20 us each per layer)
inline constexpr double kMaxTokenCount = 1e15;               // a routing histogram entry

// Sweeps.
inline constexpr int64_t kMaxSweepConfigs = int64_t{1} << 20;  // product of the axes
inline constexpr int64_t kMaxSweepValues = 10'000;             // values of all axes together

// Hardware (SI base units).
inline constexpr double kMaxBandwidth = 1e15;   // bytes/s (1 PB/s; HBM3e is 8e12)
inline constexpr double kMaxFlops = 1e18;       // FLOP/s per device (1 EFLOP/s; B200 FP4 is 1e16)
inline constexpr double kMaxBytes = 1e15;       // bytes of one memory (1 PB; HBM is 3e11)
inline constexpr double kMaxLatency = 1;        // seconds
inline constexpr double kMaxSize = 1e18;        // efficiency-curve sizes (elements, bytes, rows)

// a * b when it fits in int64 (both non-negative), else nullopt.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace moesim::limits
