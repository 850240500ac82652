// SPDX-License-Identifier: MIT
// The strategy search: every configuration of a scenario's sweep axes is loaded and checked
// (impossible ones rejected with the checker's reason), pruned when the persistent-state bound
// already exceeds HBM (search/memory_bound.hpp), and otherwise simulated with the engine for
// the scenario's routing.num_sampled_steps sampled steps.
//
// Work is split into rounds of blocks of consecutive configurations (a block shares one graph,
// SweepSpace::block_size); processes take blocks round-robin, threads of a process pull blocks
// from a shared counter, and each thread has its own ConfigEvaluator (graph, cost model, engine).
// After each round, rank 0 receives the round's outcomes and hands them to the consumer in
// index order. So the output never depends on the thread or process count, and memory holds one
// round of outcomes, not the whole sweep.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "report/step_report.hpp"
#include "search/distributed.hpp"
#include "search/ranking.hpp"
#include "search/sweep_space.hpp"

namespace moesim {

enum class ConfigStatus : uint8_t { rejected, pruned, simulated };

struct ConfigOutcome {
  int64_t index = 0;
  ConfigStatus status = ConfigStatus::rejected;
  std::string reason_path;        // rejected: the JSON pointer the checker named
  std::string reason;             // rejected or pruned: why, in words
  double memory_bound_bytes = 0;  // pruned and simulated
  double step_time_s = 0;         // simulated: mean over the sampled steps
  double step_time_p99_s = 0;
  double tokens_per_s = 0;
  double mfu = 0;
  double peak_hbm_bytes = 0;
  double peak_ddr_bytes = 0;
  // Where the time went on the rank that ends the step (StepReport): compute stream busy, waiting
  // for collectives, the pipeline bubble.
  double compute_s = 0;
  double exposed_comm_s = 0;
  double bubble_s = 0;
  int64_t num_devices = 0;
  bool fits = false;  // simulated and within HBM and host DDR
};

// Evaluates configurations one at a time, keeping the last graph (rebuilt only when the
// structure changes), its stats, the cost model and an engine. Not thread-safe: one per thread.
class ConfigEvaluator {
 public:
  ConfigEvaluator(const SweepSpace& space, bool distinct_ranks);
  ~ConfigEvaluator();
  ConfigEvaluator(const ConfigEvaluator&) = delete;
  ConfigEvaluator& operator=(const ConfigEvaluator&) = delete;

  ConfigOutcome evaluate(int64_t index);
  // A configuration loaded by the caller (capacity planning); `index` only labels the outcome.
  ConfigOutcome evaluate(int64_t index, const LoadedConfig& loaded);
  int64_t num_graphs_built() const { return num_graphs_built_; }
  // Routing samplers made: one per routing and EP layout, kept across graphs (a few at most).
  int64_t num_samplers_built() const { return num_samplers_built_; }
  // The full step report of a configuration that loads (the sweep's `--explain`), simulated as
  // the sweep simulates it; throws InputError with the checker's message for one that does not.
  StepReport explain(int64_t index);

 private:
  // Simulates a loaded scenario with the kept graph, cost model and engine where they still apply.
  StepReport simulate(const Scenario& s, const LoadedConfig& loaded);
  struct State;
  const SweepSpace& space_;
  bool distinct_ranks_;
  std::unique_ptr<State> state_;
  int64_t num_graphs_built_ = 0;
  int64_t num_samplers_built_ = 0;
};

// Whether a configuration whose persistent-state bound is `bound_bytes` can be skipped. The
// bound is shaved by a relative 1e-9 so that rounding in its sums never prunes a configuration
// that the engine (which sums the same terms in another order) would find exactly at capacity.
bool cannot_fit(double bound_bytes, double hbm_capacity_bytes);

struct SweepRunOptions {
  int64_t threads = 1;
  bool distinct_ranks = true;
  // Rank 0: each outcome, in index order, as soon as its round is complete.
  std::function<void(const ConfigOutcome&)> consume;
  // Rank 0: (configurations done, total), from the calling thread, a few times a second.
  std::function<void(int64_t, int64_t)> progress;
  // Single process only: when it becomes true (a signal handler sets it), the workers stop after
  // the configuration each is on, and the outcomes of the longest finished prefix of the index
  // order are consumed; the rest are dropped.
  const std::atomic<bool>* stop = nullptr;
};

// Runs the sweep over `dist`'s processes. Exceptions from a worker are rethrown here. Returns the
// number of configurations consumed: all of them, or after a stop the prefix 0..n-1 that finished.
int64_t run_sweep(const SweepSpace& space, const SweepRunOptions& options, Distributed& dist);

// What a sweep's report needs, gathered from outcomes in index order (bounded by `top` and
// `max_listed`, whatever the number of configurations).
class SweepSummary {
 public:
  SweepSummary(int64_t top, int64_t max_listed) : max_listed_(max_listed), top_(top) {}
  void add(const ConfigOutcome& o);

  int64_t num_configs_total = 0;
  int64_t num_configs_rejected = 0;
  int64_t num_configs_pruned = 0;
  int64_t num_configs_simulated = 0;
  int64_t num_configs_fit = 0;
  std::map<std::string, int64_t> rejected_by_path;  // JSON pointer the checker named -> count
  std::vector<ConfigOutcome> rejected;              // the first max_listed and the first of each reason path, by index
  std::vector<ConfigOutcome> pruned;                // the first max_listed, by index
  const std::vector<RankedPoint>& results() const { return top_.points(); }
  const std::vector<RankedPoint>& pareto() const { return pareto_.points(); }

 private:
  int64_t max_listed_;
  TopN top_;
  ParetoFront pareto_;  // of the configurations that fit
};

// Outcomes as bytes, for gathering over processes.
std::string encode_outcomes(const std::vector<ConfigOutcome>& outcomes);
std::vector<ConfigOutcome> decode_outcomes(const std::string& bytes);

}  // namespace moesim
