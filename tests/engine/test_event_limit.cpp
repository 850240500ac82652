// SPDX-License-Identifier: MIT
// Where the engine stops short of a step: after EngineOptions::max_events events (a prefix of the
// full run, reported as incomplete), and at the end of its clock (a step longer than
// limits::kMaxSimulatedSeconds is bad input naming the op, never an overflowed time).
#include <doctest/doctest.h>

#include <string>

#include "../graph/graph_test_util.hpp"
#include "core/error.hpp"
#include "core/limits.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using test::Plan;

namespace {

HardwareSpec h200() { return load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")); }

// Kernels run one after the other on one rank.
StepGraph kernels(const std::vector<Op>& ops) {
  StepGraph g;
  g.source = "kernels.json";
  g.plan = ParallelPlan(MeshShape{1, 1, 1, 1, 1, 1});
  Program p;
  ProgramWriter w(p);
  for (const Op& op : ops) w.add(op, "big_gemm");
  g.programs.push_back(std::move(p));
  return g;
}

Op gemm_of(double flops) {
  Op op;
  op.kind = OpKind::gemm;
  op.m = op.n = op.k = 1 << 20;
  op.flops = flops;
  return op;
}

}  // namespace

TEST_CASE("max_events stops the run after that many events: a prefix of the full run, marked incomplete") {
  Plan moe;
  moe.ep = 8;
  moe.global_batch = 16;
  moe.seq = 2048;
  const Scenario s = test::scenario(moe);
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(g, cost);
  const StepResult full = engine.run({});
  REQUIRE(full.complete);
  REQUIRE(full.num_events > 100);

  Picoseconds reached = 0;
  for (const int64_t limit : {int64_t{1}, int64_t{10}, full.num_events / 2, full.num_events - 1}) {
    CAPTURE(limit);
    EngineOptions o;
    o.max_events = limit;
    const StepResult cut = engine.run(o);
    CHECK_FALSE(cut.complete);
    CHECK(cut.num_events == limit);
    // Events are handled in time order: the time reached grows with the limit, short of the step.
    CHECK(cut.step_time >= reached);
    CHECK(cut.step_time <= full.step_time);
    CHECK(cut.rank_end.empty());
    reached = cut.step_time;
  }
  // A limit the step does not reach changes nothing; a stopped run leaves nothing behind.
  for (const int64_t limit : {full.num_events, full.num_events + 1, int64_t{0}}) {
    CAPTURE(limit);
    EngineOptions o;
    o.max_events = limit;
    const StepResult r = engine.run(o);
    CHECK(r.complete);
    CHECK(r.num_events == full.num_events);
    CHECK(r.step_time == full.step_time);
    CHECK(r.rank_end == full.rank_end);
  }
}

TEST_CASE("a step beyond the engine's clock is bad input naming the file and the op, at any scale") {
  const CostModel cost(h200());
  // A kernel of 0.3 of the clock (a large GEMM's time is proportional to its FLOPs) fits; four of
  // them in a row end past the clock, as does one of absurd size.
  const double peak = cost.hardware().device.peak_flops.bf16.value;
  const double one_second = cost.kernel_seconds(gemm_of(peak));  // ~1 / efficiency
  const Op fits = gemm_of(0.3 * limits::kMaxSimulatedSeconds * peak / one_second);
  REQUIRE(cost.kernel_seconds(fits) == doctest::Approx(0.3 * limits::kMaxSimulatedSeconds).epsilon(0.01));
  {
    const StepGraph g = kernels({fits});
    Engine engine(g, cost);
    const StepResult r = engine.run({});
    CHECK(r.complete);
    CHECK(static_cast<double>(r.step_time) * 1e-12 == doctest::Approx(cost.kernel_seconds(fits)).epsilon(1e-9));
  }
  for (const std::vector<Op>& ops : {std::vector<Op>{fits, fits, fits, fits}, std::vector<Op>{gemm_of(1e300)}}) {
    const StepGraph g = kernels(ops);
    Engine engine(g, cost);
    try {
      (void)engine.run({});
      FAIL("no error");
    } catch (const InputError& e) {
      CHECK(e.file() == "kernels.json");
      CHECK(e.message().find("the simulated step would last more than 1000000 s") != std::string::npos);
      CHECK(e.message().find("op big_gemm of rank 0") != std::string::npos);
    }
  }
}
