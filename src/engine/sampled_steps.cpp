// SPDX-License-Identifier: MIT
#include "engine/sampled_steps.hpp"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <thread>

namespace moesim {

double engine_state_bytes(const StepGraph& graph) {
  // 8 (end) + 4 (predecessors left, then the op's state) per op and rank; the slabs, their
  // block handles and placement frontiers are per track, a few per program (slab_tracks.hpp),
  // rounded up here for them: the default's peak RSS is 74 MB with one engine, 155 MB with two.
  constexpr double kBytesPerOpAndRank = 16;
  double ops = 0;
  for (int64_t r = 0; r < graph.plan.num_ranks(); ++r) {
    ops += static_cast<double>(graph.programs[static_cast<size_t>(graph.plan.program_of(r))].ops.size());
  }
  return ops * kBytesPerOpAndRank;
}

size_t sampled_step_workers(const StepGraph& graph, const EngineOptions& options, const SampledStepsOptions& steps) {
  const auto n = static_cast<size_t>(std::max<int64_t>(steps.steps, 1));
  size_t workers = std::clamp<size_t>(static_cast<size_t>(std::max<int64_t>(steps.threads, 1)), 1, n);
  if (steps.memory_budget_bytes > 0 && !options.distinct_ranks && workers > 1) {
    const double fit = steps.memory_budget_bytes / std::max(engine_state_bytes(graph), 1.0);
    workers = std::clamp<size_t>(static_cast<size_t>(fit), 1, workers);
  }
  return workers;
}

std::vector<StepResult> run_sampled_steps(const StepGraph& graph, const CostModel& cost, EngineOptions options,
                                          const SampledStepsOptions& steps) {
  const auto n = static_cast<size_t>(std::max<int64_t>(steps.steps, 0));
  std::vector<StepResult> results(n);
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::mutex report;
  int64_t done = 0;

  // Steps are taken in index order, so after a failure every step before it has run or is running:
  // the lowest failing index is the one an in-order run meets first.
  const auto work = [&] {
    size_t i = next.fetch_add(1);
    if (i >= n) return;
    try {
      Engine engine(graph, cost);
      EngineOptions eo = options;
      for (; i < n; i = failed.load() ? n : next.fetch_add(1)) {
        eo.step = static_cast<int64_t>(i);
        eo.record_timeline = i == 0 && steps.timeline_of_first_step;
        results[i] = engine.run(eo);
        if (steps.on_step) {
          const std::lock_guard<std::mutex> lock(report);
          steps.on_step(++done);
        }
      }
    } catch (...) {
      errors[i] = std::current_exception();
      failed = true;
    }
  };
  const size_t threads = sampled_step_workers(graph, options, steps);
  if (threads == 1) {
    work();
  } else {
    std::vector<std::jthread> pool;
    pool.reserve(threads);
    for (size_t t = 0; t < threads; ++t) pool.emplace_back(work);
  }
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  return results;
}

}  // namespace moesim
