// SPDX-License-Identifier: MIT
// The host issuing ops (scenario host.op_issue and host.kernel_issue, engine.hpp): closed forms on
// hand-built programs (kernels shorter than the issue time wait for the host; longer ones run back
// to back; an op of k kernels costs the host op_issue + k kernel_issue) and, on a whole step, a
// slower host is never faster and the step is never shorter than the host's issue.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../graph/graph_test_util.hpp"
#include "core/error.hpp"
#include "engine/engine.hpp"

using namespace moesim;
using test::Plan;

namespace {

Picoseconds ps(double seconds) { return static_cast<Picoseconds>(std::llround(seconds * 1e12)); }

// The step of one rank running program `p`, with the host's pace.
StepGraph one_rank(Program p, double op_issue_s, double kernel_issue_s = 0) {
  StepGraph g;
  g.plan = ParallelPlan(MeshShape{1, 1, 1, 1, 1, 1});
  g.programs.push_back(std::move(p));
  g.tokens_per_micro_batch = 1;
  g.host_op_issue_s = op_issue_s;
  g.host_kernel_issue_s = kernel_issue_s;
  return g;
}

// One rank running `n` copies of one memory-bound kernel on the compute queue.
StepGraph kernels(int n, double host_op_issue_s) {
  Program p;
  ProgramWriter w(p);
  Op op;
  op.kind = OpKind::elementwise;
  op.bytes_read = op.bytes_written = 64e6;
  for (int i = 0; i < n; ++i) w.add(op, "op");
  return one_rank(std::move(p), host_op_issue_s);
}

std::map<std::string, Picoseconds> exposed_of(const StepResult& r) { return {r.exposed.begin(), r.exposed.end()}; }

// One rank running a chain of memory-bound ops of these kernel counts on the compute queue.
StepGraph chain(const std::vector<int32_t>& kernels, double op_issue_s, double kernel_issue_s) {
  Program p;
  ProgramWriter w(p);
  for (size_t i = 0; i < kernels.size(); ++i) {
    Op op;
    op.kind = OpKind::elementwise;
    op.bytes_read = op.bytes_written = 8e6 * static_cast<double>(i + 1);
    op.num_kernels = kernels[i];
    w.add(op, "op" + std::to_string(i));
  }
  return one_rank(std::move(p), op_issue_s, kernel_issue_s);
}

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

TEST_CASE("per-kernel host time: op i is issued at the sum over j < i of (op_issue + kernels(j) x kernel_issue)") {
  const CostModel cost(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  const std::vector<int32_t> kernels{1, 8, 2, 24, 1, 13};
  const double op_issue = 150e-6, kernel_issue = 30e-6;
  const StepGraph g = chain(kernels, op_issue, kernel_issue);
  Engine engine(g, cost);
  EngineOptions o;
  o.record_timeline = true;
  const StepResult r = engine.run(o);
  // By hand: the issue times, each op's kernel time (the cost model's, with its launch overhead per
  // kernel), and the chain on one queue: start = max(issue, previous end).
  std::vector<Picoseconds> issue, start, end;
  Picoseconds host = 0, gpu = 0, idle = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    issue.push_back(host);
    host += ps(op_issue) + kernels[i] * ps(kernel_issue);
    const Picoseconds s = std::max(issue.back(), gpu);
    if (i > 0 && s > gpu) idle += s - gpu;
    start.push_back(s);
    gpu = s + ps(cost.kernel_seconds(g.programs[0].ops[i]));
    end.push_back(gpu);
  }
  REQUIRE(r.timeline.records.size() == kernels.size());
  for (const ExecRecord& e : r.timeline.records) {
    CAPTURE(e.op);
    CHECK(e.start == start[e.op]);
    CHECK(e.end == end[e.op]);
  }
  CHECK(r.step_time == end.back());
  // These ops are shorter than the host's time on the ones before them: every start is its issue,
  // and the GPU's idle time is the host's.
  for (size_t i = 0; i < kernels.size(); ++i) CHECK(start[i] == issue[i]);
  const auto exposed = exposed_of(r);
  CHECK(idle > 0);
  CHECK(exposed.at("host") == idle);
  CHECK(r.compute_stream_busy + idle == r.step_time);
}

TEST_CASE("kernel_issue 0 is op_issue alone, and op_issue 0 with kernel_issue c charges c per kernel") {
  const CostModel cost(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  const std::vector<int32_t> kernels{3, 3, 3, 3};
  // 3 kernels of c each is one op_issue of 3c: the same step to the picosecond.
  const double c = 500e-6;
  const StepGraph per_op = chain(kernels, 3 * c, 0), per_kernel = chain(kernels, 0, c);  // the engines keep them
  Engine a_engine(per_op, cost);
  Engine b_engine(per_kernel, cost);
  const StepResult a = a_engine.run({});
  const StepResult b = b_engine.run({});
  CHECK(a.step_time == b.step_time);
  CHECK(exposed_of(a).at("host") == exposed_of(b).at("host"));
  CHECK(a.num_events == b.num_events);
  // A host issue past the engine's clock is refused as input, naming the op.
  // (op i at 4097 i s: op 245 is the first past 1e6 s.)
  const StepGraph slow = chain(std::vector<int32_t>(300, 4096), 1.0, 1.0);
  Engine refused(slow, cost);
  try {
    (void)refused.run({});
    FAIL("a host issue past the clock was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("op op245 of rank 0 is issued by the host after") != std::string::npos);
  }
}

namespace {

// One rank: a router of `router_flops` in `phase` on the compute queue, then `n` memory-bound ops
// after it on the compute queue, then one swap-out on the copy queue that depends on nothing.
StepGraph router_then(Phase phase, double router_flops, int n, double op_issue_s, bool waits) {
  Program p;
  ProgramWriter w(p);
  Op router;
  router.kind = OpKind::router;
  router.phase = phase;
  router.m = router.n = router.k = 4096;
  router.flops = router_flops;
  w.add(router, "moe.router");
  Op op;
  op.kind = OpKind::elementwise;
  op.phase = phase;
  op.bytes_read = op.bytes_written = 1e6;
  for (int i = 0; i < n; ++i) w.add(op, "op" + std::to_string(i));
  Op swap;
  swap.kind = OpKind::swap_out;
  swap.stream = Stream::copy;
  swap.phase = phase;
  swap.comm_bytes = 1e6;
  w.add(swap, "swap");
  StepGraph g = one_rank(std::move(p), op_issue_s);
  g.host_waits_for_routing = waits;
  return g;
}

std::vector<ExecRecord> by_op(const StepResult& r) {
  std::vector<ExecRecord> out(r.timeline.records.size());
  for (const ExecRecord& e : r.timeline.records) out.at(e.op) = e;
  return out;
}

}  // namespace

TEST_CASE("the host waits for a forward router: what follows is issued from its end, at the host's pace") {
  const CostModel cost(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  // A router far longer than the host's issue of everything after it, and ops shorter than one issue.
  const int n = 6;
  const double issue = 200e-6;
  const StepGraph ahead = router_then(Phase::fwd, 4e15, n, issue, false);
  const StepGraph waits = router_then(Phase::fwd, 4e15, n, issue, true);
  const Picoseconds router = ps(cost.kernel_seconds(ahead.programs[0].ops[0]));
  const Picoseconds d = ps(cost.kernel_seconds(ahead.programs[0].ops[1]));
  REQUIRE(router > (n + 1) * ps(issue));
  REQUIRE(d < ps(issue));
  EngineOptions o;
  o.record_timeline = true;
  Engine a_engine(ahead, cost);
  Engine b_engine(waits, cost);
  const auto a = by_op(a_engine.run(o));
  const auto b = by_op(b_engine.run(o));
  REQUIRE(a.size() == static_cast<size_t>(n + 2));
  REQUIRE(b.size() == a.size());
  // Without the wait the host issued everything during the router: its successors run back to back
  // after it, and the swap on its own queue started at its issue.
  for (int i = 1; i <= n; ++i) CHECK(a[static_cast<size_t>(i)].start == router + (i - 1) * d);
  CHECK(a[static_cast<size_t>(n + 1)].start == (n + 1) * ps(issue));
  // With the wait, op i after the router is issued at router + (i - 1) x issue and starts then (each
  // op is shorter than an issue); the swap too, though it waits for nothing on the GPU.
  for (int i = 1; i <= n; ++i) CHECK(b[static_cast<size_t>(i)].start == router + (i - 1) * ps(issue));
  CHECK(b[static_cast<size_t>(n + 1)].start == router + n * ps(issue));
  CHECK(b[static_cast<size_t>(n)].end == router + (n - 1) * ps(issue) + d);
}

TEST_CASE("a recomputed router holds the host as a forward one does; a backward router does not") {
  const CostModel cost(load_hardware(read_input("h200-hgx", "hardware", "HARDWARE")));
  EngineOptions o;
  o.record_timeline = true;
  for (const Phase phase : {Phase::fwd, Phase::recompute, Phase::bwd}) {
    CAPTURE(enum_name(phase));
    // No host cost: only the wait can delay the swap, which depends on nothing.
    const StepGraph g = router_then(phase, 4e15, 2, 0, true);
    Engine engine(g, cost);
    const StepResult r = engine.run(o);
    const auto rec = by_op(r);
    const Picoseconds router_end = rec[0].end;
    REQUIRE(router_end > 0);
    CHECK(rec[3].start == (phase == Phase::bwd ? 0 : router_end));
    // The exposed-time split still adds up, and nothing is charged to the host (it cost nothing).
    CHECK(!exposed_of(r).contains("host"));
  }
}

TEST_CASE("host.waits_for_routing reaches an MoE model's graph, and not with capacity padding (static sizes)") {
  Plan moe;
  moe.ep = 8;
  Scenario s = test::scenario(moe);
  CHECK(!build_step_graph(s).host_waits_for_routing);  // the default
  s.spec.host.waits_for_routing = true;
  CHECK(build_step_graph(s).host_waits_for_routing);
  Plan padded = moe;
  padded.routing = R"({"capacity_factor": 1.25, "capacity_policy": "pad"})";
  Scenario p = test::scenario(padded);
  p.spec.host.waits_for_routing = true;
  CHECK(!build_step_graph(p).host_waits_for_routing);
  p.spec.routing.capacity_policy = CapacityPolicy::drop;  // a capacity without padding: sizes still vary
  CHECK(build_step_graph(p).host_waits_for_routing);
  Plan dense = moe;
  dense.model = "llama-3.1-8b";
  dense.ep = 1;
  Scenario d = test::scenario(dense);
  d.spec.host.waits_for_routing = true;
  CHECK(!build_step_graph(d).host_waits_for_routing);  // no router to wait for
}
