// SPDX-License-Identifier: MIT
// The host's pace from a profiler trace (trace_match.hpp's host time, host_fit.hpp's fit): the
// weighted least squares recovers known coefficients and keeps the total; a synthetic trace whose
// launches follow op_issue + kernels x kernel_issue gives back both exactly (kernels of no op
// counted with the op before, a synchronous copy's wait left out); the shipped traces' fits pinned.
#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/json_input.hpp"
#include "scenario/scenario_spec.hpp"
#include "trace/host_fit.hpp"
#include "trace/kineto_trace.hpp"
#include "trace/trace_match.hpp"

using namespace moesim;

namespace {

struct Loaded {
  StepGraph graph;
  TraceMatch match;
};

Loaded load(const char* trace, const char* scenario) {
  Loaded l;
  l.graph = build_step_graph(load_scenario(read_input(scenario, "scenarios", "SCENARIO")));
  l.match = match_trace(read_kineto_trace(trace), l.graph);
  return l;
}

}  // namespace

TEST_CASE("the fit recovers known coefficients, keeps the total, and stays non-negative") {
  const double h = 210e-6, c = 27e-6;
  // Names of 1 to 4 ops (micro-batches) of 1 to 24 kernels per op.
  std::vector<HostPaceRow> rows;
  const int kernels[] = {1, 2, 8, 1, 24, 4, 1, 13};
  for (int i = 0; i < 8; ++i) {
    const double n = 1 + i % 4, k = kernels[i];
    rows.push_back({"op" + std::to_string(i), n, n * k, n * (h + c * k)});
  }
  HostPaceFit f = fit_host_pace(rows);
  CHECK(f.kernel_identified);
  CHECK(f.op_issue_s == doctest::Approx(h).epsilon(1e-9));
  CHECK(f.kernel_issue_s == doctest::Approx(c).epsilon(1e-9));
  CHECK(f.rms_residual_s < 1e-12);

  // Noise: the coefficients move, the total N h + K c stays the trace's (the weighted residuals
  // sum to zero with the intercept).
  const double noise[] = {40e-6, -90e-6, 15e-6, 120e-6, -30e-6, 70e-6, -60e-6, 5e-6};
  for (size_t i = 0; i < rows.size(); ++i) rows[i].host_s += noise[i] * rows[i].num_ops;
  f = fit_host_pace(rows);
  CHECK(f.op_issue_s * f.num_ops + f.kernel_issue_s * f.num_kernels == doctest::Approx(f.host_s).epsilon(1e-12));
  CHECK(f.rms_residual_s > 0);

  // Time per op falling with kernels: no negative kernel_issue, the mean per op instead.
  const std::vector<HostPaceRow> falling{{"a", 1, 1, 500e-6}, {"b", 1, 10, 100e-6}, {"c", 2, 40, 300e-6}};
  f = fit_host_pace(falling);
  CHECK(f.kernel_issue_s == 0);
  CHECK(f.op_issue_s == doctest::Approx(900e-6 / 4).epsilon(1e-12));
  // Time proportional to kernels with a negative intercept: op_issue 0, the slope through the origin.
  const std::vector<HostPaceRow> steep{{"a", 1, 1, 10e-6}, {"b", 1, 10, 400e-6}, {"c", 1, 20, 800e-6}};
  f = fit_host_pace(steep);
  CHECK(f.op_issue_s == 0);
  CHECK(f.kernel_issue_s == doctest::Approx((10e-6 + 4000e-6 + 16000e-6) / (1 + 100 + 400)).epsilon(1e-12));
  // One kernel per op everywhere: kernel_issue cannot be told from op_issue.
  const std::vector<HostPaceRow> flat{{"a", 1, 1, 100e-6}, {"b", 2, 2, 500e-6}};
  f = fit_host_pace(flat);
  CHECK_FALSE(f.kernel_identified);
  CHECK(f.kernel_issue_s == 0);
  CHECK(f.op_issue_s == doctest::Approx(200e-6).epsilon(1e-12));
}

TEST_CASE("a synthetic trace whose host spends op_issue + kernels x kernel_issue on each op gives both back") {
  // The dense slice's program; one range per op (named as the op) launching as many kernels as the
  // graph counts, c apart, the next op h + c after an op's last launch, two steps. Inside one op a
  // kernel of no range (the autograd engine's), and in another a synchronous copy to the host that
  // waits `wait` for the GPU: its time is the host's wait, not its pace.
  const Scenario s = load_scenario(read_input("scenarios/trace/dense-s8k-mb1.json", "scenarios", "S"));
  const StepGraph g = build_step_graph(s);
  const Program& p = g.programs[0];
  const double h_us = 180, c_us = 23, wait_us = 900;
  nlohmann::json events = nlohmann::json::array();
  int64_t corr = 1;
  double ts = 0;
  auto launch = [&](const std::string& kernel, const char* cat, double call_us, double gpu_start, double gpu_us) {
    events.push_back({{"ph", "X"}, {"cat", "cuda_runtime"}, {"name", "cudaLaunchKernel"}, {"pid", 1}, {"tid", 1},
                      {"ts", ts}, {"dur", call_us}, {"args", {{"correlation", corr}}}});
    events.push_back({{"ph", "X"}, {"cat", cat}, {"name", kernel}, {"pid", 0}, {"tid", 7}, {"ts", gpu_start},
                      {"dur", gpu_us}, {"args", {{"device", 0}, {"stream", 7}, {"correlation", corr}}}});
    ++corr;
  };
  double want_blocked = 0;
  for (int step = 0; step < 2; ++step) {
    const double step_begin = ts;
    for (size_t i = 0; i < p.ops.size(); ++i) {
      const Op& op = p.ops[i];
      const double begin = ts;
      for (int k = 0; k < op.num_kernels; ++k) {
        if (i == 7 && k == 0) {
          // A copy to the host of 2 us that starts when the GPU gets to it, `wait` after the call.
          launch("Memcpy DtoH (Device -> Pageable)", "gpu_memcpy", wait_us + 5, ts + wait_us, 2);
          want_blocked += wait_us;
          ts += wait_us;  // the host resumes after the copy
        } else {
          launch("void at::native::vectorized_elementwise_kernel<4>", "kernel", 3, ts + 5, 2);
        }
        ts += c_us;
      }
      events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", p.name_of(op)}, {"pid", 1}, {"tid", 1},
                        {"ts", begin - 1}, {"dur", ts - begin + 1}});
      if (i == 3) {  // a kernel of no range between this op and the next
        const double at = ts;
        ts += h_us / 2;
        launch("void at::native::vectorized_elementwise_kernel<4>", "kernel", 3, ts + 5, 2);
        ts = at;
      }
      ts += h_us;
    }
    launch("void at::native::vectorized_elementwise_kernel<4>", "kernel", 3, ts + 5, 2);  // closes the last op's time
    events.push_back({{"ph", "X"}, {"cat", "user_annotation"}, {"name", "ProfilerStep#" + std::to_string(step + 1)},
                      {"pid", 1}, {"tid", 1}, {"ts", step_begin - 2}, {"dur", ts - step_begin + 10}});
    ts += 5000;
  }
  const TraceMatch m = match_trace(parse_kineto_trace(nlohmann::json{{"traceEvents", events}}.dump(), "host.json"), g);
  double want_host = 0;
  for (const Op& op : p.ops) want_host += (h_us + c_us * op.num_kernels) * 1e-6;
  CHECK(m.host_blocked_s == doctest::Approx(want_blocked / 2 * 1e-6).epsilon(1e-9));
  CHECK(m.host_s == doctest::Approx(want_host).epsilon(1e-9));
  CHECK(m.launches_per_step == doctest::Approx(1.0 + 1 + [&] {
          double k = 0;
          for (const Op& op : p.ops) k += op.num_kernels;
          return k;
        }()));
  // Every op of the dense slice launches at least one kernel in the graph, so each op's time is
  // exactly h + k c and the fit gives back h and c.
  for (const Op& op : p.ops) REQUIRE(op.num_kernels > 0);
  for (const Op& op : p.ops) {
    const OpMeasure& o = m.ops.at(p.name_of(op));
    CHECK(o.host_s == doctest::Approx(static_cast<double>(o.num_ops) * (h_us + c_us * op.num_kernels) * 1e-6).epsilon(1e-9));
  }
  const HostPaceFit f = fit_host_pace(host_pace_rows(m, p));
  CHECK(f.kernel_identified);
  CHECK(f.op_issue_s == doctest::Approx(h_us * 1e-6).epsilon(1e-9));
  CHECK(f.kernel_issue_s == doctest::Approx(c_us * 1e-6).epsilon(1e-9));
}

TEST_CASE("the shipped traces' host pace: pinned, and the fitted host spends the trace's total") {
  // What scenarios/trace/ states (their model's s8192-mb1 trace), to 1e-6: the fit is a pure
  // function of the trace's microsecond timestamps; the tolerance covers floating-point contraction
  // only, and any change to the matching or the estimator moves them by far more.
  struct Pinned {
    const char* trace;
    const char* scenario;
    double op_issue_s, kernel_issue_s, host_s, blocked_s;
  };
  const Pinned pinned[] = {
      {"tests/data/traces/dense-s8192-mb1.rank0.json.gz", "scenarios/trace/dense-s8k-mb1.json", 265.269048e-6, 31.346033e-6,
       49.1408530e-3, 0},
      {"tests/data/traces/moe-s8192-mb1.rank0.json.gz", "scenarios/trace/moe-s8k-mb1.json", 229.967566e-6, 30.972809e-6,
       63.0269321e-3, 2.10035400e-3},
  };
  for (const Pinned& want : pinned) {
    CAPTURE(want.trace);
    const Loaded l = load(want.trace, want.scenario);
    const Program& p = l.graph.programs[0];
    const HostPaceFit f = fit_host_pace(host_pace_rows(l.match, p));
    CHECK(f.kernel_identified);
    CHECK(f.op_issue_s == doctest::Approx(want.op_issue_s).epsilon(1e-6));
    CHECK(f.kernel_issue_s == doctest::Approx(want.kernel_issue_s).epsilon(1e-6));
    CHECK(l.match.host_s == doctest::Approx(want.host_s).epsilon(1e-6));
    CHECK(l.match.host_blocked_s == doctest::Approx(want.blocked_s).epsilon(1e-6));
    CHECK(f.num_ops == static_cast<double>(p.ops.size()));
    CHECK(f.op_issue_s * f.num_ops + f.kernel_issue_s * f.num_kernels == doctest::Approx(l.match.host_s).epsilon(1e-12));
    // The host's time is the launches' span less the waits (and any launches before the first op).
    double span = 0;
    for (const StepMeasure& s : l.match.steps) span += s.launch_span_s / l.match.num_steps();
    CHECK(l.match.host_s <= span - l.match.host_blocked_s + 1e-12);
    CHECK(l.match.host_s > 0.95 * span);
  }
}
