// SPDX-License-Identifier: MIT
// The pruning bound: equal to the persistent state the graph builder computes when every weight
// trains (but for the communicators' buffers), below it with LoRA (the adapters' state is left out), and never above
// the engine's simulated peak on a sample of plans (pipeline stages, HSDP, EP, LoRA, recompute).
#include <doctest/doctest.h>

#include <algorithm>

#include "engine/engine.hpp"
#include "search/memory_bound.hpp"
#include "search/sweep.hpp"

using namespace moesim;

namespace {

const SweepSpace& small() {
  static const SweepSpace space(read_input("tests/data/sweep-small.json", "scenarios", "SCENARIO"));
  return space;
}

double engine_peak(const Scenario& s) {
  const StepGraph g = build_step_graph(s);
  const CostModel cost(s.hardware);
  Engine engine(g, cost);
  EngineOptions o;
  o.distinct_ranks = true;
  const StepResult r = engine.run(o);
  double peak = 0;
  for (const RankMemory& m : r.memory) peak = std::max(peak, m.peak_hbm_bytes);
  return peak;
}

void check_against_graph(const Scenario& s, bool exact) {
  const StepGraph g = build_step_graph(s);
  const std::vector<double> bound = persistent_lower_bound_per_stage(s);
  REQUIRE(bound.size() == g.programs.size());
  for (size_t stage = 0; stage < bound.size(); ++stage) {
    CAPTURE(stage);
    const PersistentMemory& p = g.programs[stage].persistent;
    CHECK(bound[stage] > 0);
    CHECK(bound[stage] <= p.total());
    if (exact) {
      // Everything but the communicators' buffers, which the bound leaves out.
      const double state = p.params + p.master_params + p.grads + p.optimizer_states;
      CHECK(bound[stage] == doctest::Approx(state + runtime_reserved_bytes(s.spec, s.hardware)).epsilon(1e-12));
      CHECK(p.runtime >= runtime_reserved_bytes(s.spec, s.hardware));
    }
  }
}

}  // namespace

TEST_CASE("the bound is the graph's persistent state when every weight trains") {
  // Full fine-tuning, one stage and two stages (embedding and head on different stages), HSDP.
  check_against_graph(*small().load_with({}).scenario, true);
  check_against_graph(
      *small().load_with({{"/parallel/fsdp/shard", "4"}, {"/parallel/pp/stages", "2"}, {"/parallel/ep", "4"}}).scenario,
      true);
  check_against_graph(
      *small().load_with({{"/parallel/fsdp", R"({"shard": 4, "replicate": 2})"}, {"/parallel/ep", "2"}}).scenario,
      true);
  check_against_graph(*small().load_with({{"/training/optimizer/kind", "\"sgd\""}}).scenario, true);
  // Every ZeRO stage, and tensor parallelism (a vocabulary-parallel embedding), uneven stages.
  for (const char* zero : {"0", "1", "2"}) {
    check_against_graph(*small().load_with({{"/parallel/fsdp/zero_stage", zero}}).scenario, true);
  }
  check_against_graph(
      *small().load_with({{"/parallel/fsdp/shard", "4"}, {"/parallel/tp", R"({"degree": 2})"}, {"/parallel/ep", "4"}}).scenario,
      true);
  check_against_graph(*small()
                           .load_with({{"/parallel/fsdp/shard", "4"}, {"/parallel/ep", "4"},
                                       {"/parallel/pp", R"({"stages": 2, "layers_per_chunk": [20, 28]})"}})
                           .scenario,
                      true);
}

TEST_CASE("with LoRA the bound leaves out the adapters, so it is below the graph's state") {
  const Scenario k3 = load_scenario(read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO"));
  check_against_graph(k3, false);
  // ... but not by much: the frozen base dominates.
  const double persistent = build_step_graph(k3).programs[0].persistent.total();
  CHECK(persistent_lower_bound_bytes(k3) > 0.95 * persistent);
}

TEST_CASE("the bound never exceeds the engine's simulated peak") {
  const SweepSpace& s = small();
  int64_t checked = 0;
  for (int64_t i = 0; i < s.num_configs(); ++i) {
    const LoadedConfig c = s.load(i);
    if (!c.scenario) continue;
    CAPTURE(i);
    const double bound = persistent_lower_bound_bytes(*c.scenario);
    if (cannot_fit(bound, c.scenario->hardware.device.hbm_capacity.value)) continue;
    CHECK(bound <= engine_peak(*c.scenario));
    ++checked;
  }
  CHECK(checked >= 8);
  const Scenario k3 = load_scenario(read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO"));
  CHECK(persistent_lower_bound_bytes(k3) <= engine_peak(k3));
  const Scenario pp =
      *s.load_with({{"/parallel/fsdp/shard", "4"}, {"/parallel/pp/stages", "2"}, {"/parallel/ep", "4"}}).scenario;
  CHECK(persistent_lower_bound_bytes(pp) <= engine_peak(pp));
}

TEST_CASE("a configuration is pruned only when the bound exceeds HBM") {
  CHECK(cannot_fit(81e9, 80e9));
  CHECK_FALSE(cannot_fit(80e9, 80e9));
  CHECK_FALSE(cannot_fit(79e9, 80e9));
  // Rounding in the bound's sums never prunes a plan exactly at capacity.
  CHECK_FALSE(cannot_fit(80e9 * (1 + 1e-12), 80e9));
}
