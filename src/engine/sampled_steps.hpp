// SPDX-License-Identifier: MIT
// The sampled steps of one graph (routing draws 0..n-1), spread over worker threads. A step
// depends only on the graph, the options and its index, so each thread runs its own engine on
// the shared, read-only graph and cost model, and the results are those of one engine running
// the steps in order: the same StepResults, in step order.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "engine/engine.hpp"

namespace moesim {

struct SampledStepsOptions {
  int64_t steps = 1;
  // Worker threads, each with an engine (its per-rank state); at most `steps` are started, and 1
  // runs every step in the calling thread.
  int64_t threads = 1;
  // Workers beyond the first only while their engines' per-rank state (engine_state_bytes) fits
  // in this many bytes; 0: no limit. Every rank of 16,384 is ~14 GB per engine.
  double memory_budget_bytes = 0;
  // Record the first step's timeline (traces, the memory CSV); the others never record one.
  bool timeline_of_first_step = false;
  // Called after each step, with how many are done, from the worker that finished it (never two
  // calls at once): a progress line.
  std::function<void(int64_t done)> on_step;
};

// An upper bound on the per-rank state one engine holds for `graph` when it simulates every rank
// (per op of every rank: start and end times, predecessors left, state, the memory ledger's
// frontier and block handles); with distinct ranks it holds less.
double engine_state_bytes(const StepGraph& graph);

// The workers run_sampled_steps starts: `steps.threads`, at most one per step, and with every rank
// simulated no more than the memory budget holds engines of engine_state_bytes (at least one).
size_t sampled_step_workers(const StepGraph& graph, const EngineOptions& options, const SampledStepsOptions& steps);

// Runs the steps with `options` (its `step` and `record_timeline` are set per step). The first
// failure by step index is rethrown after every worker stopped: the error a single engine
// running the steps in order would have thrown first.
std::vector<StepResult> run_sampled_steps(const StepGraph& graph, const CostModel& cost, EngineOptions options,
                                          const SampledStepsOptions& steps);

}  // namespace moesim
