// SPDX-License-Identifier: MIT
// The sweep end to end in the library: every configuration accounted for once, outcomes that do
// not depend on the number of threads, the evaluator's graph reuse, and outcomes surviving the
// byte encoding that MPI gathers.
#include <doctest/doctest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "engine/power_runs.hpp"
#include "scenario/device_spread.hpp"
#include "search/sweep.hpp"
#include "search/sweep_report.hpp"

using namespace moesim;

namespace {

const SweepSpace& small() {
  static const SweepSpace space(read_input("tests/data/sweep-small.json", "scenarios", "SCENARIO"));
  return space;
}

struct Run {
  std::vector<int64_t> order;
  std::string csv;
  std::string json;
};

Run run(int64_t threads) {
  const SweepSpace& s = small();
  auto dist = single_process();
  SweepSummary summary(5, 3);
  Run out;
  SweepRunOptions o;
  o.threads = threads;
  o.consume = [&](const ConfigOutcome& c) {
    out.order.push_back(c.index);
    summary.add(c);
    out.csv += sweep_csv_row(s, c);
  };
  run_sweep(s, o, *dist);
  out.json = sweep_report_json(s, summary, SweepRunInfo{});
  return out;
}

}  // namespace

TEST_CASE("every configuration is consumed once, in index order") {
  const Run r = run(2);
  REQUIRE(static_cast<int64_t>(r.order.size()) == small().num_configs());
  for (size_t i = 0; i < r.order.size(); ++i) CHECK(r.order[i] == static_cast<int64_t>(i));
}

TEST_CASE("the output does not depend on the number of threads") {
  const Run one = run(1);
  const Run two = run(2);
  const Run three = run(3);
  CHECK(one.csv == two.csv);
  CHECK(one.csv == three.csv);
  CHECK(one.json == two.json);
  CHECK(one.json == three.json);
}

TEST_CASE("counts add up and each status has its evidence") {
  const SweepSpace& s = small();
  SweepSummary summary(100, 100);
  ConfigEvaluator ev(s, true);
  for (int64_t i = 0; i < s.num_configs(); ++i) {
    const ConfigOutcome o = ev.evaluate(i);
    CAPTURE(i);
    switch (o.status) {
      case ConfigStatus::rejected:
        CHECK_FALSE(o.reason.empty());
        break;
      case ConfigStatus::pruned:
        CHECK(o.memory_bound_bytes > s.base().hardware.device.hbm_capacity.value);
        break;
      case ConfigStatus::simulated:
        CHECK(o.step_time_s > 0);
        CHECK(o.peak_hbm_bytes >= o.memory_bound_bytes);
        CHECK(o.mfu > 0);
        CHECK(o.mfu <= 1);
        break;
    }
    summary.add(o);
  }
  CHECK(summary.num_configs_total == s.num_configs());
  CHECK(summary.num_configs_rejected + summary.num_configs_pruned + summary.num_configs_simulated == s.num_configs());
  // The fixture is built to have all three (see its doc).
  CHECK(summary.num_configs_rejected == 28);
  CHECK(summary.num_configs_pruned == 8);
  CHECK(summary.num_configs_simulated == 12);
  int64_t by_path = 0;
  for (const auto& [path, n] : summary.rejected_by_path) by_path += n;
  CHECK(by_path == summary.num_configs_rejected);
  CHECK(summary.rejected_by_path.at("/parallel") == 24);
  CHECK(summary.rejected_by_path.at("/parallel/ep") == 4);
  // Graphs are built once per structure: the trailing routing axis reuses them.
  CHECK(ev.num_graphs_built() == summary.num_configs_simulated / 2);
  // Every simulated configuration is ranked; the front only holds ones that fit.
  CHECK(static_cast<int64_t>(summary.results().size()) == summary.num_configs_simulated);
  for (const RankedPoint& p : summary.pareto()) CHECK(p.fits);
  // With room for one example, every reason path still gets its first one.
  SweepSummary one(1, 1);
  for (int64_t i = 0; i < s.num_configs(); ++i) one.add(ev.evaluate(i));
  REQUIRE(one.rejected.size() == 2);
  CHECK(one.rejected[0].reason_path == "/parallel");
  CHECK(one.rejected[1].reason_path == "/parallel/ep");
  CHECK(one.rejected[0].index < one.rejected[1].index);
}

TEST_CASE("a reused graph gives the same outcome as a fresh evaluator") {
  const SweepSpace& s = small();
  ConfigEvaluator warm(s, true);
  // Simulated configurations 24..35 (shard 8, replicate 1); evaluate them in order, then each
  // one alone.
  std::vector<ConfigOutcome> in_order;
  for (int64_t i = 24; i < 36; ++i) in_order.push_back(warm.evaluate(i));
  for (const ConfigOutcome& o : in_order) {
    CAPTURE(o.index);
    REQUIRE(o.status == ConfigStatus::simulated);
    ConfigEvaluator fresh(s, true);
    const ConfigOutcome f = fresh.evaluate(o.index);
    CHECK(f.step_time_s == o.step_time_s);
    CHECK(f.peak_hbm_bytes == o.peak_hbm_bytes);
    CHECK(f.peak_ddr_bytes == o.peak_ddr_bytes);
  }
}

TEST_CASE("a routing sampler serves every graph of its routing and EP layout: warm and fresh evaluators agree") {
  // sweep-small: shard x replicate x EP (3) x recompute x routing (2, fastest). A warm evaluator
  // keeps one sampler per (routing, EP) and reuses it across the graphs of other shards and
  // recompute policies; each outcome is what a fresh evaluator gives.
  const SweepSpace& s = small();
  ConfigEvaluator warm(s, true);
  int64_t simulated = 0;
  std::set<std::pair<std::string, std::string>> layouts;  // (EP, routing) of the simulated ones
  for (int64_t i = 0; i < s.num_configs(); ++i) {
    const ConfigOutcome o = warm.evaluate(i);
    if (o.status != ConfigStatus::simulated) continue;
    ++simulated;
    const LoadedConfig c = s.load(i);
    layouts.insert({std::to_string(c.scenario->spec.parallel.ep), std::string(enum_name(c.scenario->spec.routing.distribution))});
    CAPTURE(i);
    ConfigEvaluator fresh(s, true);
    const ConfigOutcome f = fresh.evaluate(i);
    CHECK(f.step_time_s == o.step_time_s);
    CHECK(f.peak_hbm_bytes == o.peak_hbm_bytes);
  }
  REQUIRE(simulated >= 12);
  CHECK(warm.num_samplers_built() == static_cast<int64_t>(layouts.size()));  // 3 EP x 2 routings
  CHECK(warm.num_samplers_built() < simulated);                              // each serves 2 graphs
}

TEST_CASE("on a file with a power model, each configuration runs in its own power state: warm and fresh agree") {
  // sweep-small on h100-hgx: the warm evaluator's cached engine is the fixed state's; a solved state
  // runs on an engine of its own. A stale engine (the previous configuration's, or the fixed state's)
  // would give another step than a fresh evaluator's.
  nlohmann::json j = nlohmann::json::parse(read_input("tests/data/sweep-small.json", "scenarios", "SCENARIO").text);
  j["hardware"] = "h100-hgx";
  const SweepSpace s(InputText{"tests/data/sweep-small.json", j.dump(), false});
  ConfigEvaluator warm(s, true);
  int64_t simulated = 0;
  for (int64_t i = 0; i < s.num_configs(); ++i) {
    const ConfigOutcome o = warm.evaluate(i);
    if (o.status != ConfigStatus::simulated) continue;
    ++simulated;
    CAPTURE(i);
    ConfigEvaluator fresh(s, true);
    CHECK(fresh.evaluate(i).step_time_s == o.step_time_s);
    // And what `simulate` reports for it (explain: the step report, its power state solved).
    const StepReport r = warm.explain(i);
    REQUIRE(r.power.has_value());
    CHECK(r.power->solved);
    CHECK(r.step_time_s == o.step_time_s);
    // The same steps simulated directly in their power state, outside the evaluator's caches.
    const Scenario sc = *s.load(i).scenario;
    const StepGraph g = build_step_graph(sc);
    EngineOptions eo;
    eo.distinct_ranks = true;
    eo.rank_compute_slowdown = rank_compute_slowdowns(sc);  // h100-hgx's speed spread
    const PoweredSteps direct = simulate_in_power_state(CostModel(sc.hardware), [&](const CostModel& cost) {
      Engine engine(g, cost);
      std::vector<StepResult> steps;
      for (int64_t step = 0; step < sc.spec.routing.num_sampled_steps; ++step) {
        eo.step = step;
        steps.push_back(engine.run(eo));
      }
      return steps;
    }, &g);
    double mean = 0;
    for (const StepResult& x : direct.results) mean += static_cast<double>(x.step_time) * 1e-12;
    mean /= static_cast<double>(direct.results.size());
    CHECK(o.step_time_s == doctest::Approx(mean).epsilon(1e-12));
  }
  CHECK(simulated >= 12);
}

TEST_CASE("outcomes survive the byte encoding") {
  ConfigOutcome a;
  a.index = 7;
  a.status = ConfigStatus::rejected;
  a.reason_path = "/parallel/ep";
  a.reason = "f.json: /parallel/ep: must divide";
  ConfigOutcome b;
  b.index = 1234567890123;
  b.status = ConfigStatus::simulated;
  b.step_time_s = 1.0 / 3.0;
  b.step_time_p99_s = 0.5;
  b.tokens_per_s = 1e6;
  b.mfu = 0.41;
  b.peak_hbm_bytes = 7.5e10;
  b.peak_ddr_bytes = 1e9;
  b.memory_bound_bytes = 4e10;
  b.fits = true;
  const std::vector<ConfigOutcome> back = decode_outcomes(encode_outcomes({a, b}));
  REQUIRE(back.size() == 2);
  CHECK(back[0].index == 7);
  CHECK(back[0].status == ConfigStatus::rejected);
  CHECK(back[0].reason_path == a.reason_path);
  CHECK(back[0].reason == a.reason);
  CHECK(back[1].index == b.index);
  CHECK(back[1].step_time_s == b.step_time_s);
  CHECK(back[1].peak_hbm_bytes == b.peak_hbm_bytes);
  CHECK(back[1].memory_bound_bytes == b.memory_bound_bytes);
  CHECK(back[1].fits);
  CHECK(decode_outcomes("").empty());
  CHECK_THROWS(decode_outcomes(encode_outcomes({a}).substr(0, 5)));
}

TEST_CASE("routing mechanisms are sweep axes: one graph, each configuration its own sampler") {
  const SweepSpace s(read_input("tests/data/sweep-routing.json", "scenarios", "SCENARIO"));
  REQUIRE(s.num_configs() == 4);
  ConfigEvaluator warm(s, true);
  std::vector<ConfigOutcome> out;
  for (int64_t i = 0; i < 4; ++i) {
    out.push_back(warm.evaluate(i));
    REQUIRE(out.back().status == ConfigStatus::simulated);
  }
  CHECK(warm.num_graphs_built() == 1);
  // Mixed radix, the last axis fastest: 0 free/dropless, 1 free/drop, 2 limited/dropless, 3 limited/drop.
  CHECK(out[2].step_time_s < out[0].step_time_s);  // 2 copies a token instead of 8
  CHECK(out[1].step_time_s < out[0].step_time_s);  // Zipf 1.0's hot experts clipped at capacity
  // The reused graph draws from the configuration's own sampler: the same as a fresh evaluator.
  for (const ConfigOutcome& o : out) {
    ConfigEvaluator fresh(s, true);
    CHECK(fresh.evaluate(o.index).step_time_s == o.step_time_s);
  }
}

TEST_CASE("capacity padding is a sweep axis with a graph of its own: warm and fresh evaluators agree") {
  const SweepSpace s(read_input("tests/data/sweep-padding.json", "scenarios", "SCENARIO"));
  REQUIRE(s.num_configs() == 2);
  ConfigEvaluator warm(s, true);
  const ConfigOutcome drop = warm.evaluate(0), pad = warm.evaluate(1);
  REQUIRE(drop.status == ConfigStatus::simulated);
  REQUIRE(pad.status == ConfigStatus::simulated);
  CHECK(warm.num_graphs_built() == 2);  // the padded buffers are in the graph
  CHECK(pad.step_time_s > drop.step_time_s);
  for (const ConfigOutcome& o : {drop, pad}) {
    ConfigEvaluator fresh(s, true);
    const ConfigOutcome f = fresh.evaluate(o.index);
    CHECK(f.step_time_s == o.step_time_s);
    CHECK(f.peak_hbm_bytes == o.peak_hbm_bytes);
  }
}

TEST_CASE("run_sweep returns the configurations consumed: all, or none after a stop before the start") {
  const SweepSpace& s = small();
  auto dist = single_process();
  int64_t consumed = 0;
  SweepRunOptions o;
  o.threads = 2;
  o.consume = [&](const ConfigOutcome&) { ++consumed; };
  CHECK(run_sweep(s, o, *dist) == s.num_configs());
  CHECK(consumed == s.num_configs());
  std::atomic<bool> stop{true};
  o.stop = &stop;
  consumed = 0;
  CHECK(run_sweep(s, o, *dist) == 0);
  CHECK(consumed == 0);
}
