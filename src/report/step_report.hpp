// SPDX-License-Identifier: MIT
// StepReport: the answer to "how long does a step take, and does it fit" - the engine's sampled
// steps turned into step time (mean, P50, P99), throughput, MFU/HFU, memory against capacity,
// a time breakdown and the ops the step spends most time in.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "cost/power_state.hpp"
#include "engine/engine.hpp"
#include "graph/graph_stats.hpp"
#include "report/error_band.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim {

struct StepReport {
  std::string scenario;
  std::string model;
  std::string hardware;
  int64_t num_devices = 0;
  int64_t num_sampled_steps = 0;
  int64_t tokens_per_step = 0;
  std::vector<double> step_times_s;  // one per sampled step
  double step_time_s = 0;            // mean
  double step_time_p50_s = 0;
  double step_time_p99_s = 0;
  // How far the model's step times were from measurements on this hardware (error_band.hpp).
  ErrorBand error_band;
  double tokens_per_s = 0;
  // Expert load balance per sampled step (StepResult::ep_load_imbalance: the busiest EP rank's
  // expert rows over the balanced T x top_k, averaged over the step's MoE layers), and its P50/P99;
  // empty for a step without sampled expert routing.
  std::vector<double> ep_load_imbalance;
  double ep_load_imbalance_p50 = 0;
  double ep_load_imbalance_p99 = 0;
  // The hardware's speed spread as simulate and sweep apply it (rank_compute_slowdowns): the
  // expected slowest part's rank and the factor on its compute-bound kernels' time (-1 and 1: none).
  int32_t slow_part_rank = -1;
  double slow_part_slowdown = 1;
  double speed_spread = 0;  // the hardware's device.speed_spread
  // Process groups whose members span more than one scale-up domain (their collectives cross the
  // scale-out network): (group kind, size, domains spanned), for the kinds the step communicates over.
  struct SpanningGroup {
    std::string kind;
    int64_t size = 0;
    int64_t num_domains = 0;
  };
  std::vector<SpanningGroup> groups_across_domains;
  int64_t domain_size = 0;
  double model_flops_per_step = 0;
  double flops_per_step = 0;
  // The clock the step ran at under its power limit (cost/power_state.hpp) and how many
  // simulations settled it; reported for hardware files with device.power.
  std::optional<PowerState> power;
  int power_runs = 1;
  double peak_flops_per_device = 0;  // at the compute format
  double mfu = 0;
  double hfu = 0;
  double peak_hbm_bytes = 0;         // max over ranks and steps, persistent state included
  double hbm_capacity_bytes = 0;
  double peak_ddr_bytes = 0;
  double ddr_capacity_bytes = 0;
  double persistent_bytes = 0;       // of the rank with the HBM peak
  // What that rank's HBM held at its peak: persistent parts, transient tensors by category, the
  // allocator's reserve; they sum to peak_hbm_bytes.
  std::vector<std::pair<std::string, double>> memory_at_peak;
  bool fits = false;
  int32_t peak_rank = 0;
  std::string peak_op;
  double peak_time_s = 0;
  // What this scenario asks for that the step does not model, one sentence each.
  std::vector<std::string> not_modelled;
  // Breakdown of the rank that ends the first sampled step (the lowest-numbered of several).
  int32_t breakdown_rank = 0;
  std::vector<std::pair<std::string, double>> compute_s;        // by category
  std::vector<std::pair<std::string, double>> communication_s;  // busy time by collective kind
  double swap_s = 0;                  // copy-stream busy time
  double compute_stream_s = 0;        // the compute stream running compute kernels
  // The rest of the step on the compute stream, by what held it: a collective kind, pipeline_bubble,
  // swap (see StepResult::exposed). compute_stream_s + their sum = the slowest rank's step time.
  std::vector<std::pair<std::string, double>> exposed_s;
  double exposed_comm_s = 0;  // of exposed_s: waiting for collectives (not the bubble, swap or other)
  double bubble_s = 0;        // of exposed_s: the pipeline bubble
  std::vector<std::pair<std::string, double>> top_ops_s;        // busiest op names of the slowest rank
  std::vector<std::pair<std::string, double>> critical_path_s;  // the chain that ends the step, by op name
  int64_t critical_path_length = 0;
  double sim_wall_s = 0;
  int64_t num_events = 0;
  int64_t num_simulated_ranks = 0;  // every rank, or one per class of interchangeable ranks
};

// `steps` are the engine's results for sampled steps 0..n-1.
StepReport make_step_report(const Scenario& scenario, const StepGraph& graph, const GraphStats& stats,
                            const std::vector<StepResult>& steps, double sim_wall_s);

std::string step_report_text(const StepReport& r);
std::string step_report_json(const StepReport& r);

}  // namespace moesim
