// SPDX-License-Identifier: MIT
// Fusion analysis (`moesim fusion`): kernel fusions a step graph could use, found by rule, and
// what each would gain, measured by simulating a rewritten copy of the graph.
//
// The graph records no tensor identities, only buffers (Program::buffers) and the ops that
// allocate and free them; tape.cpp allocates a tensor's buffer at its producer and frees it at its
// last reader of the pass, or keeps it for the backward. So a buffer that op X allocates and op Y
// frees, where Y comes right after X in the program (no op of any queue between them), is a tensor
// X writes and only Y reads, and that the backward does not keep: an intermediate. Rules:
//   - memory-bound chain: adjacent compute ops of memory-bound kinds (norm, activation,
//     elementwise: residual adds, gating products) linked by such intermediates;
//   - matmul epilogue: a GEMM (gemm, lora_gemm, grouped_gemm) whose output's only reader is the
//     memory-bound op right after it (and the chain that follows);
//   - never across a collective: both ops run on the compute queue (not communication, not copy),
//     nothing stands between them, a non-first op waits on no op of another queue and a non-last
//     op is waited on by none (a collective, copy or send never sees a later input or a later
//     output than before);
//   - same phase, layer and micro-batch.
// Chains are maximal. A candidate groups the chains of the same ops (names without their layer
// prefix; backward chains map to the forward ops they differentiate) over layers, micro-batches,
// stages and phases.
//
// The fused op: the head's kind, dtype, shape and routing layer; FLOPs summed; HBM bytes read and
// written summed less each intermediate once each (its write and its read); one launch; the
// effects of its ops less the intermediates' buffers (which disappear); the dependencies of its
// ops, and the ops that waited on any of them wait on it. The kept-for-backward activation memory
// a candidate saves is zero by rule (an intermediate is never kept); the transient memory of the
// intermediates is gone, and the re-simulated peak shows what that is worth.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "engine/engine.hpp"
#include "graph/step_graph.hpp"

namespace moesim {

enum class FusionRule : uint8_t { memory_bound_chain, matmul_epilogue };

// One occurrence: ops [first, first + count) of programs[program], fused into one.
struct FusionChain {
  uint32_t program = 0;
  uint32_t first = 0;
  uint32_t count = 0;
};

struct FusionCandidate {
  FusionRule rule = FusionRule::memory_bound_chain;
  std::vector<std::string> ops;   // forward op names without the layer prefix, in forward order
  std::vector<OpKind> kinds;      // forward kinds of the first occurrence, in issue order
  std::vector<Phase> phases;      // the phases it occurs in
  std::vector<FusionChain> chains;
  // Per rank, the most over the programs (one program per pipeline stage):
  int64_t occurrences_per_rank = 0;
  int64_t launches_saved_per_rank = 0;
  double hbm_bytes_saved_per_rank = 0;          // each intermediate's write and read
  double transient_bytes_avoided = 0;           // the largest intermediate buffer of one occurrence
  double kept_activation_bytes_saved = 0;       // zero by rule (see above)
  // Over all ranks of the step:
  double hbm_bytes_saved_all_ranks = 0;
  std::vector<std::string> constraints;
  std::string key() const;  // rule + ops: identifies a candidate
};

// The candidates of a graph, in a stable order (most HBM bytes saved first).
std::vector<FusionCandidate> find_fusion_candidates(const StepGraph& graph);

// A copy of `graph` with each chain replaced by its fused op. Chains must be disjoint, each of
// adjacent ops of one program (as find_fusion_candidates makes them).
StepGraph apply_fusions(const StepGraph& graph, const std::vector<FusionChain>& chains);


struct FusionGain {
  int32_t candidate = 0;          // index into FusionAnalysis::candidates
  double step_time_s = 0;         // simulated with this candidate alone
  double step_delta_s = 0;        // step_time_s - baseline (negative: faster)
  double peak_hbm_bytes = 0;      // the largest peak over ranks
  double peak_delta_bytes = 0;
};

struct FusionCumulative {
  int32_t candidate = 0;
  double step_time_s = 0;         // with this candidate and every one before it
  double peak_hbm_bytes = 0;
};

struct FusionAnalysisOptions {
  int64_t top = 10;               // candidates in the greedy cumulative order
  EngineOptions engine;           // how each variant is simulated (the baseline alike)
  bool greedy = true;              // false: add them in the order of their gains alone (top sims, not top^2 / 2)
  bool check = true;              // run the graph checks on every rewritten graph (throws on a violation)
};

struct FusionAnalysis {
  std::string scenario;
  double baseline_step_s = 0;
  double baseline_peak_hbm_bytes = 0;
  std::vector<FusionCandidate> candidates;
  std::vector<FusionGain> gains;          // one per candidate, best (most negative delta) first
  std::vector<FusionCumulative> cumulative;  // greedy: each step adds the remaining top candidate that helps most
  bool greedy = true;
  int64_t simulations = 0;  // graphs simulated (each in its power state: engine/power_runs.hpp)
};

// Finds the candidates, simulates the baseline and each candidate alone, then the greedy order
// over the `top` best. Throws std::logic_error if a rewritten graph fails a check.
FusionAnalysis analyse_fusions(const StepGraph& graph, const CostModel& cost, const FusionAnalysisOptions& options);

}  // namespace moesim
