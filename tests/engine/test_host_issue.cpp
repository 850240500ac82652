// SPDX-License-Identifier: MIT
// The host issuing ops (scenario host.op_issue, engine.hpp): closed forms on hand-built programs
// (kernels shorter than the issue time wait for the host; longer ones run back to back) and, on
// a whole step, a slower host is never faster and the step is never shorter than the host's issue.
#include <doctest/doctest.h>

#include <cmath>
#include <map>

#include "../graph/graph_test_util.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using test::Plan;

namespace {

Picoseconds ps(double seconds) { return static_cast<Picoseconds>(std::llround(seconds * 1e12)); }

// One rank running `n` copies of one memory-bound kernel on the compute queue.
StepGraph kernels(int n, double host_op_issue_s) {
  StepGraph g;
  g.plan = ParallelPlan(MeshShape{1, 1, 1, 1, 1, 1});
  Program p;
  ProgramWriter w(p);
  Op op;
  op.kind = OpKind::elementwise;
  op.bytes_read = op.bytes_written = 64e6;
  for (int i = 0; i < n; ++i) w.add(op, "op");
  g.programs.push_back(std::move(p));
  g.tokens_per_micro_batch = 1;
  g.host_op_issue_s = host_op_issue_s;
  return g;
}

std::map<std::string, Picoseconds> exposed_of(const StepResult& r) { return {r.exposed.begin(), r.exposed.end()}; }

}  // namespace

TEST_CASE("kernels shorter than the host's issue time: the step is (n - 1) issues + the last kernel") {
  const CostModel cost(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  const double kernel = cost.kernel_seconds(kernels(1, 0).programs[0].ops[0]);
  const double issue = 4 * kernel;
  const StepGraph g = kernels(5, issue);
  Engine engine(g, cost);
  const StepResult r = engine.run({});
  CHECK(r.step_time == 4 * ps(issue) + ps(kernel));
  // The compute stream waited for the host between kernels, and the split stays exact.
  const auto exposed = exposed_of(r);
  CHECK(r.compute_stream_busy == 5 * ps(kernel));
  CHECK(exposed.at("host") == 4 * (ps(issue) - ps(kernel)));
  CHECK(r.compute_stream_busy + exposed.at("host") == r.step_time);
}

TEST_CASE("kernels longer than the host's issue time run back to back: the host is ahead") {
  const CostModel cost(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  const double kernel = cost.kernel_seconds(kernels(1, 0).programs[0].ops[0]);
  for (double issue : {0.0, kernel / 4, kernel}) {
    CAPTURE(issue);
    const StepGraph g = kernels(5, issue);
    Engine engine(g, cost);
    const StepResult r = engine.run({});
    CHECK(r.step_time == 5 * ps(kernel));
    CHECK(!exposed_of(r).contains("host"));
  }
}

TEST_CASE("a whole step: a slower host is never faster, and the step is at least the host's issue of every op") {
  Plan plan;  // qwen3-30b-a3b, FSDP2 over 8, EP 8, 2 micro-batches of 4,096 tokens
  plan.ep = 8;
  plan.global_batch = 16;
  const Scenario s = test::scenario(plan);
  StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Picoseconds previous = 0;
  for (double issue : {0.0, 20e-6, 100e-6, 400e-6, 2e-3}) {
    CAPTURE(issue);
    g.host_op_issue_s = issue;
    Engine engine(g, cost);
    const StepResult r = engine.run({});
    CHECK(r.step_time >= previous);
    const auto ops = static_cast<Picoseconds>(g.programs[0].ops.size());
    CHECK(r.step_time >= (ops - 1) * ps(issue));
    Picoseconds total = r.compute_stream_busy;
    for (const auto& [cause, t] : r.exposed) total += t;
    CHECK(total == r.step_time);
    if (issue == 0) CHECK(!exposed_of(r).contains("host"));
    if (issue >= 2e-3) CHECK(exposed_of(r).at("host") > 0);
    previous = r.step_time;
  }
}
