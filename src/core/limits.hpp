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
// The same over all pipeline stages' programs: the whole graph (stages x the above could reach
// 10^9 layer passes with 10,000 two-layer stages).
inline constexpr int64_t kMaxStepLayerPasses = int64_t{1} << 22;
// Expert assignments of one EP group in one micro-batch (ep x tokens per rank x top_k): what the
// routing sampler draws at once (the default scenario: 2^23); x 1000 (the capacity factor) it
// still fits in int64.
inline constexpr int64_t kMaxRoutedAssignments = int64_t{1} << 50;
inline constexpr int64_t kMaxSampledSteps = 1000;            // routing re-samples (as --steps)
inline constexpr double kMaxSlowdown = 1000;                 // straggler factor
inline constexpr double kMaxSkew = 100;                      // Zipf exponent
inline constexpr double kMaxCapacityFactor = 1000;           // expert capacity, x the balanced load
inline constexpr double kMaxBiasUpdateSpeed = 10;            // routing bias step, log-popularity units
inline constexpr int64_t kMaxBiasStartStep = 10000;          // bias updates iterated before step 0 (~20 us each per layer)
inline constexpr double kMaxTokenCount = 1e15;               // a routing histogram entry

// Exported graphs (graph/graph_json.cpp), per op and rank; its bytes (read, written, sent,
// buffers, persistent state) are bounded by kMaxBytes. The default scenario's largest op is
// 1.9e13 FLOPs; its largest amount of bytes 4.3e10 (its persistent parameters).
inline constexpr double kMaxOpFlops = 1e21;                        // 1000 s at 1 EFLOP/s
inline constexpr int64_t kMaxTensorElements = int64_t{1} << 50;    // one tensor, and each GEMM dimension
// Ops, names, buffers, and all tensors, memory effects and dependencies of one program: the
// default scenario's program has 73,448 tensors; indices are 32-bit.
inline constexpr int64_t kMaxProgramEntries = int64_t{1} << 28;

// The engine's clock (int64 picoseconds reach 106 days): a step that would last longer is refused.
inline constexpr double kMaxSimulatedSeconds = 1e6;  // 11.6 days; a real step takes seconds

// `moesim plan devices` flags.
inline constexpr double kMaxPlanTokens = 1e18;  // --tokens: a million times today's largest runs
inline constexpr double kMaxPlanDays = 36'500;  // --days: a century

// Sweeps.
inline constexpr int64_t kMaxSweepConfigs = int64_t{1} << 20;  // product of the axes
inline constexpr int64_t kMaxSweepValues = 10'000;             // values of all axes together

// Hardware (SI base units).
inline constexpr double kMaxBandwidth = 1e15;   // bytes/s (1 PB/s; HBM3e is 8e12)
inline constexpr double kMaxFlops = 1e18;       // FLOP/s per device (1 EFLOP/s; B200 FP4 is 1e16)
inline constexpr double kMaxBytes = 1e15;       // bytes of one memory (1 PB; HBM is 3e11)
inline constexpr double kMaxLatency = 1;        // seconds
inline constexpr double kMaxSize = 1e18;        // efficiency-curve sizes (elements, bytes, rows)
inline constexpr double kMaxWatts = 1e5;        // board power of one device (100 kW; a GB200 is 1.2e3)

// a * b when it fits in int64 (both non-negative), else nullopt.
inline std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace moesim::limits
