// SPDX-License-Identifier: MIT
// The large fusions a training stack ships as kernels of their own, which moesim models as
// scenario switches rather than graph rewrites: DSA's indexer, sparse attention and its gated
// variant (fused_ops.dsa), KDA's recurrence stages (fused_ops.kda), the permute folded into the
// experts' grouped GEMM (fused_ops.permute_gemm), the loss fused with the vocabulary projection
// (loss.kind cce), flash attention (fused_ops.flash_attention), one kernel per norm and
// activation (fused_ops.elementwise fused) and the TP collectives fused into the projections'
// GEMMs (parallel.tp.comm_overlap fused). Each switch the scenario leaves off, and that its model
// can use, is a candidate: the scenario with it on is built and simulated like the baseline, and
// the graphs are compared for what the fusion removes - kernels, HBM traffic, and the activations
// the backward no longer keeps (the unfused stages' intermediates that a fused backward recomputes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json_input.hpp"
#include "engine/engine.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

struct KnownFusion {
  std::string field;   // the JSON pointer switched: "/fused_ops/kda"
  std::string value;   // the value it is set to, as JSON: "true", "\"cce\""
  std::string what;    // the ops it fuses, in words
  // Per rank, the most over the pipeline stages' programs (baseline - fused; positive = saved):
  int64_t launches_saved_per_rank = 0;       // kernels of the compute ops
  double hbm_bytes_saved_per_rank = 0;       // bytes read and written by the compute ops
  double kept_activation_bytes_saved = 0;    // activations the forward keeps for the backward
  // The fused scenario simulated with the baseline's engine options:
  double step_time_s = 0;
  double step_delta_s = 0;    // step_time_s - baseline (negative: faster)
  double peak_hbm_bytes = 0;  // the largest peak over ranks
  double peak_delta_bytes = 0;
  std::vector<std::string> constraints;
  // Set when the scenario with the switch on does not load (the plan's checks refuse it): why;
  // nothing above is measured then.
  std::string not_simulated;
};

// Activation bytes a program's forward (or recompute) allocates and its backward frees: what the
// step keeps from forward to backward, per rank of that program.
double kept_activation_bytes(const Program& p);

// The switches `input` (the scenario `s` was loaded from) leaves off that its model can use, each
// simulated with `engine` on its own graph against the baseline's step and peak. Returned in the
// order of their step gain (most negative step_delta_s first), then those that could not be
// simulated.
std::vector<KnownFusion> known_fusions(const InputText& input, const Scenario& s, const StepGraph& baseline,
                                       double baseline_step_s, double baseline_peak_hbm_bytes,
                                       const EngineOptions& engine);

}  // namespace moesim
