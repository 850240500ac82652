// SPDX-License-Identifier: MIT
// Capacity planning with the engine: how many devices a training run needs to finish in time,
// and how long a sequence (or how large a micro-batch) fits a plan.
//
// Devices. The scenario fixes the model, the hardware, the recipe and the model-parallel degrees
// (tp, pp, cp, ep). Device counts are multiples of a unit: whole nodes, and whole model-parallel
// groups (tp x pp x cp x the shards EP needs). For a count N, the plans tried are the FSDP splits
// of the N / (tp pp cp) data-parallel ranks into shard x replicate where EP divides shard x cp
// and the shard group stays in one scale-up domain (HSDP: shard inside, replicate across), plus
// the scenario's own shard when it divides. By default the global batch grows with the
// data-parallel degree so that each rank runs the scenario's number of micro-steps (weak scaling,
// what a team does when it adds devices); --fixed-batch keeps the scenario's batch (and rejects
// counts it cannot spread over). Each plan is checked, pruned by the memory bound, and simulated;
// the fastest plan that fits gives the time for the token budget:
//   steps = ceil(tokens / tokens_per_step),  time = steps x mean step time,  cost = N x time.
// The search doubles N until the deadline is met, then bisects between the last count that missed
// and the first that met it: it assumes that more devices are never slower, which weak scaling
// makes close to true but the engine does not promise (the JSON lists every count evaluated).
//
// Fit. The largest sequence length (in steps of `granularity` tokens) or micro-batch that fits
// in memory, by the engine's peak HBM and DDR over the scenario's sampled steps: doubling from
// the scenario's value until it no longer fits, then bisection (peak memory grows with both).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "search/sweep.hpp"

namespace moesim {

struct DevicePlanOptions {
  double tokens = 0;        // training tokens
  double days = 0;          // deadline
  int64_t max_devices = 0;  // largest count tried; 0: the hardware's max_devices, else 16,384
  bool fixed_batch = false;
  bool distinct_ranks = true;
  // Called after each plan the search evaluates, with how many so far (a progress line). The
  // search stops when it has its answer, so there is no total to give.
  std::function<void(int64_t evaluated)> progress;
};

struct PlanCandidate {
  int64_t num_devices = 0;
  int64_t shard = 0;
  int64_t replicate = 0;
  int64_t global_batch_size = 0;
  int64_t tokens_per_step = 0;
  ConfigOutcome outcome;  // step time, memory, or why rejected / pruned
  double train_s = 0;     // for the token budget (simulated plans that fit)
  double device_hours = 0;
  bool meets_deadline = false;
};

// The best plan at one device count (or the reason there is none).
struct DeviceCountResult {
  int64_t num_devices = 0;
  std::vector<PlanCandidate> plans;  // every split tried
  std::optional<size_t> best;        // index into plans: the fastest that fits
};

struct DevicePlanResult {
  int64_t unit = 0;  // device counts are multiples of this
  int64_t devices_per_node = 0;
  int64_t domain_size = 0;                // devices per scale-up domain (supernode)
  std::vector<DeviceCountResult> counts;  // in the order evaluated
  std::optional<PlanCandidate> answer;    // the fewest devices that meet the deadline
};

DevicePlanResult plan_devices(const SweepSpace& space, const DevicePlanOptions& options);

enum class FitVariable { sequence_length, micro_batch_size };

struct FitOptions {
  FitVariable vary = FitVariable::sequence_length;
  int64_t granularity = 0;  // 0: 1,024 tokens (times cp, and tp with sequence parallelism), or 1 sequence
  int64_t max_value = 0;    // 0: 4,194,304 tokens or 4,096 sequences
  bool distinct_ranks = true;
  std::function<void(int64_t evaluated)> progress;  // after each probe, as DevicePlanOptions::progress
};

struct FitProbe {
  int64_t value = 0;
  ConfigOutcome outcome;
  bool fits = false;
};

struct FitResult {
  FitVariable vary = FitVariable::sequence_length;
  int64_t granularity = 0;
  std::vector<FitProbe> probes;           // in the order evaluated
  std::optional<FitProbe> largest_fit;    // none when even one granule does not fit
  std::optional<FitProbe> smallest_miss;  // the next value up, when one was tried
};

FitResult plan_fit(const SweepSpace& space, const FitOptions& options);

std::string device_plan_text(const SweepSpace& space, const DevicePlanOptions& options, const DevicePlanResult& r);
std::string device_plan_json(const SweepSpace& space, const DevicePlanOptions& options, const DevicePlanResult& r);
std::string fit_text(const SweepSpace& space, const FitResult& r);
std::string fit_json(const SweepSpace& space, const FitResult& r);

}  // namespace moesim
