// SPDX-License-Identifier: MIT
// The slowest device of a job (scenario/device_spread.hpp): the expected maximum of n normal draws
// against its closed forms and tables, the slow rank it puts in the last place, and the engine
// slowing that rank's compute-bound kernels by the factor and nothing else.
#include <doctest/doctest.h>

#include <cmath>
#include <numbers>

#include "../graph/graph_test_util.hpp"
#include "cost/power_state.hpp"
#include "engine/engine.hpp"
#include "scenario/device_spread.hpp"

using namespace moesim;
using test::Plan;

TEST_CASE("the expected maximum of n standard normals: closed forms for n <= 5, tables beyond") {
  const double pi = std::numbers::pi, root_pi = std::sqrt(pi);
  CHECK(expected_max_standard_normal(1) == 0);
  CHECK(expected_max_standard_normal(2) == doctest::Approx(1 / root_pi).epsilon(1e-10));
  CHECK(expected_max_standard_normal(3) == doctest::Approx(1.5 / root_pi).epsilon(1e-10));
  CHECK(expected_max_standard_normal(4) == doctest::Approx(6 / (pi * root_pi) * std::atan(std::sqrt(2.0))).epsilon(1e-10));
  CHECK(expected_max_standard_normal(5) ==
        doctest::Approx(5 / (4 * root_pi) * (1 + 6 / pi * std::asin(1.0 / 3))).epsilon(1e-10));
  // Beyond five no closed form: Harter's tables (1961) to their five decimals.
  CHECK(expected_max_standard_normal(10) == doctest::Approx(1.53875).epsilon(1e-5));
  CHECK(expected_max_standard_normal(100) == doctest::Approx(2.50759).epsilon(1e-5));
  CHECK(expected_max_standard_normal(1000) == doctest::Approx(3.24144).epsilon(1e-5));
  // Grows with n, ever more slowly.
  double last = 0, last_step = 1e9;
  for (int64_t n = 2; n <= (int64_t{1} << 20); n *= 2) {
    const double e = expected_max_standard_normal(n);
    CHECK(e > last);
    CHECK(e - last < last_step);
    last_step = e - last;
    last = e;
  }
}

TEST_CASE("the slowest part sits on the last rank, at 1 + spread x E[max of n]") {
  Plan p;
  p.model = "llama-3.1-8b";
  Scenario s = test::scenario(p);  // 8 devices
  s.hardware.device.speed_spread = 0.02;
  const std::vector<double> f = rank_compute_slowdowns(s);
  REQUIRE(f.size() == 8);
  for (size_t r = 0; r + 1 < f.size(); ++r) CHECK(f[r] == 1.0);
  CHECK(f.back() == doctest::Approx(1 + 0.02 * 1.4236003060).epsilon(1e-10));

  s.hardware.device.speed_spread = 0;
  CHECK(rank_compute_slowdowns(s).empty());
  s.hardware.device.speed_spread = 0.02;
  s.spec.num_devices = 1;
  CHECK(rank_compute_slowdowns(s).empty());
}

TEST_CASE("a slow part stretches its compute-bound kernels by the factor, nothing else") {
  Plan p;
  p.model = "llama-3.1-8b";
  p.devices = 2;
  p.shard = 2;
  p.global_batch = 2;
  p.seq = 2048;
  p.overlap = false;  // no overlap slowdown: each kernel's time is the cost model's alone
  const Scenario s = test::scenario(p);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(g, cost);
  EngineOptions o;
  o.record_timeline = true;
  const StepResult nominal = engine.run(o);
  constexpr double kFactor = 1.25;
  o.rank_compute_slowdown = {1.0, kFactor};
  const StepResult slowed = engine.run(o);
  REQUIRE(slowed.timeline.records.size() == nominal.timeline.records.size());
  CHECK(slowed.step_time > nominal.step_time);
  // Both ranks end at the step's last collective: the breakdown's rank is the lower-numbered.
  CHECK(slowed.slowest_rank_compute_slowdown == (slowed.slowest_rank == 1 ? kFactor : 1.0));

  // Each rank's kernel durations by op, nominal and slowed.
  auto durations = [&](const StepResult& r, int32_t rank) {
    std::vector<Picoseconds> d(g.programs[0].ops.size(), -1);
    for (const ExecRecord& e : r.timeline.records) {
      if (e.rank == rank && e.stream == Stream::compute) d[e.op] = e.end - e.start;
    }
    return d;
  };
  const auto launch = static_cast<Picoseconds>(std::llround(s.hardware.device.kernel_launch_overhead.value * 1e12));
  int64_t compute_ops = 0, memory_ops = 0;
  double largest_flops = 0, ratio_of_largest = 0;
  for (int32_t rank : {0, 1}) {
    const std::vector<Picoseconds> before = durations(nominal, rank), after = durations(slowed, rank);
    for (size_t i = 0; i < before.size(); ++i) {
      const Op& op = g.programs[0].ops[i];
      if (before[i] < 0 || is_communication(op.kind)) continue;
      CAPTURE(i);
      if (rank == 0 || power_class(op.kind) == PowerClass::memory) {
        CHECK(after[i] == before[i]);  // the other rank, and HBM's pace, untouched
        memory_ops += rank == 1;
        continue;
      }
      ++compute_ops;
      // Slower by at most the factor (a kernel bound by HBM keeps its time) and never faster; the
      // tolerance is the engine's rounding to whole picoseconds.
      const double ratio = static_cast<double>(after[i] - launch) / static_cast<double>(before[i] - launch);
      CHECK(ratio >= 1 - 1e-6);
      CHECK(ratio <= kFactor + 1e-6);
      if (op.flops > largest_flops) {
        largest_flops = op.flops;
        ratio_of_largest = ratio;
      }
    }
  }
  CHECK(compute_ops > 0);
  CHECK(memory_ops > 0);
  CHECK(ratio_of_largest == doctest::Approx(kFactor).epsilon(1e-6));  // the largest GEMM is compute-bound

  // Interchangeable ranks: the slow part is a class of its own, and one representative per class
  // gives the step of every rank.
  EngineOptions d;
  d.distinct_ranks = true;
  CHECK(engine.run(d).num_simulated_ranks == 1);
  d.rank_compute_slowdown = {1.0, kFactor};
  const StepResult distinct = engine.run(d);
  CHECK(distinct.num_simulated_ranks == 2);
  CHECK(distinct.step_time == slowed.step_time);
}
