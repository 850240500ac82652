// SPDX-License-Identifier: MIT
// The executor on real GPUs (exit 77 without one, via gpu_main.cpp): the calibration scenario for
// the GPUs present runs, its timeline keeps the execution contract (stream order, explicit
// dependencies, every op timed once), and the memory it reports holds together (the slab covers
// the tensors live at once, the device holds persistent state and the slab).
#include <doctest/doctest.h>

#include <map>

#include "backend/cuda/device.hpp"
#include "backend/cuda/executor.hpp"
#include "core/error.hpp"
#include "core/json_input.hpp"

using namespace moesim;
using namespace moesim::cuda;

namespace {

const char* scenario_for(int gpus) {
  return gpus == 1 ? "scenarios/calibration/k3-slice-1gpu.json" : "scenarios/calibration/k3-slice-2gpu.json";
}

}  // namespace

TEST_CASE("a scenario whose rank count is not the GPU count is refused, naming /num_devices") {
  const int gpus = device_count();
  const Scenario s = load_scenario(read_input(scenario_for(gpus == 1 ? 2 : 1), "scenarios", "SCENARIO"));
  const StepGraph g = build_step_graph(s);
  CHECK_THROWS_WITH_AS(execute(s, g, ExecOptions{}), doctest::Contains("/num_devices"), InputError);
}

TEST_CASE("the calibration scenario runs and its timeline keeps the execution contract") {
  const int gpus = device_count();
  if (gpus > 2) return;  // the shipped calibration scenarios are for 1 and 2 GPUs
  const Scenario s = load_scenario(read_input(scenario_for(gpus), "scenarios", "SCENARIO"));
  const StepGraph g = build_step_graph(s);
  ExecOptions o;
  o.measured_steps = 1;
  const ExecResult r = execute(s, g, o);
  REQUIRE(r.ranks.size() == static_cast<size_t>(gpus));
  CHECK(r.step_time > 0);
  for (int64_t rank = 0; rank < gpus; ++rank) {
    CAPTURE(rank);
    const Program& p = g.programs[static_cast<size_t>(g.plan.program_of(rank))];
    std::map<uint32_t, ExecRecord> rec;
    for (const ExecRecord& e : r.timeline.records) {
      if (e.rank == rank) rec[e.op] = e;
    }
    REQUIRE(rec.size() == p.ops.size());
    const QueuePlan q = plan_queues(p);
    for (uint32_t i = 0; i < p.ops.size(); ++i) {
      const ExecRecord& e = rec[i];
      CHECK(e.end >= e.start);
      CHECK(e.end <= r.step_time);
      if (q.queue_pred[i] >= 0) CHECK(e.start >= rec[static_cast<uint32_t>(q.queue_pred[i])].end);
      for (uint32_t d : q.waits[i]) CHECK(e.start >= rec[d].end);
    }
    const RankRun& k = r.ranks[static_cast<size_t>(rank)];
    CHECK(k.persistent_bytes > 0);
    // The slab holds the tensors live at once on the measured times (its placement was made on
    // the warm-up step's times, so allow for the measured step's order differing a little), and
    // the device holds persistent state and the slab at least.
    CHECK(k.slab_bytes > 0);
    CHECK(k.slab_bytes >= 0.95 * (k.timeline_peak_bytes - k.persistent_bytes));
    CHECK(k.device_bytes >= k.persistent_bytes + k.slab_bytes);
    CHECK(k.program_order_peak_bytes > k.persistent_bytes);
  }
}
