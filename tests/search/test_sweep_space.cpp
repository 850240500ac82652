// SPDX-License-Identifier: MIT
// SweepSpace: the enumeration (count = product of the axis sizes, mixed radix with the last axis
// fastest), the values each configuration applies, and rejections that carry the checker's own
// JSON path and message.
#include <doctest/doctest.h>

#include <set>

#include "core/error.hpp"
#include "search/sweep_space.hpp"

using namespace moesim;

namespace {

const char* kSmall = "tests/data/sweep-small.json";

const SweepSpace& small() {
  static const SweepSpace space(read_input(kSmall, "scenarios", "SCENARIO"));
  return space;
}

}  // namespace

TEST_CASE("the number of configurations is the product of the axis sizes") {
  const SweepSpace& s = small();
  REQUIRE(s.num_axes() == 5);
  int64_t product = 1;
  for (int64_t a = 0; a < s.num_axes(); ++a) product *= static_cast<int64_t>(s.axis(a).values.size());
  CHECK(product == 2 * 2 * 3 * 2 * 2);
  CHECK(s.num_configs() == product);
  // The trailing /routing axis (2 values) makes blocks of 2 configurations that share a graph.
  CHECK(s.block_size() == 2);

  const SweepSpace k3(read_input("k3-sweep", "scenarios", "SCENARIO"));
  int64_t k3_product = 1;
  for (int64_t a = 0; a < k3.num_axes(); ++a) k3_product *= static_cast<int64_t>(k3.axis(a).values.size());
  CHECK(k3.num_configs() == k3_product);
  CHECK(k3.num_configs() >= 2000);  // "several thousand combinations before pruning"
}

TEST_CASE("every configuration is a distinct combination, the last axis varying fastest") {
  const SweepSpace& s = small();
  std::set<std::vector<int64_t>> seen;
  for (int64_t i = 0; i < s.num_configs(); ++i) seen.insert(s.value_indices(i));
  CHECK(static_cast<int64_t>(seen.size()) == s.num_configs());
  CHECK(s.value_indices(0) == std::vector<int64_t>{0, 0, 0, 0, 0});
  CHECK(s.value_indices(1) == std::vector<int64_t>{0, 0, 0, 0, 1});
  CHECK(s.value_indices(2) == std::vector<int64_t>{0, 0, 0, 1, 0});
  CHECK(s.value_indices(s.num_configs() - 1) == std::vector<int64_t>{1, 1, 2, 1, 1});
}

TEST_CASE("a configuration is the scenario with each axis's value written at its pointer") {
  const SweepSpace& s = small();
  // shard 8, replicate 1, ep 4, recompute none, skewed routing: (1, 0, 1, 0, 1).
  const int64_t index = (((1 * 2 + 0) * 3 + 1) * 2 + 0) * 2 + 1;
  const auto config = s.config(index);
  REQUIRE(config.size() == 5);
  CHECK(config[0] == std::pair<std::string, std::string>{"/parallel/fsdp/shard", "8"});
  CHECK(config[3] == std::pair<std::string, std::string>{"/recompute/policy", "\"none\""});
  const LoadedConfig c = s.load(index);
  REQUIRE(c.scenario.has_value());
  CHECK(c.scenario->spec.parallel.fsdp.shard == 8);
  CHECK(c.scenario->spec.parallel.fsdp.replicate == 1);
  CHECK(c.scenario->spec.parallel.ep == 4);
  CHECK(c.scenario->spec.recompute.policy == RecomputePolicy::none);
  CHECK(c.scenario->spec.routing.distribution == RoutingDistribution::skewed);
  CHECK(c.scenario->spec.routing.skew == 1.0);
  CHECK(c.scenario->spec.sweep.axes.empty());  // a configuration is one plan, not a sweep
  // What the axes leave alone stays as written.
  CHECK(c.scenario->spec.batch.sequence_length == 2048);
  CHECK(c.scenario->spec.loss.kind == LossKind::cce);
}

TEST_CASE("configurations differing only in routing share a structure key; others do not") {
  const SweepSpace& s = small();
  const int64_t index = (((1 * 2 + 0) * 3 + 1) * 2 + 0) * 2;
  const LoadedConfig uniform = s.load(index);
  const LoadedConfig skewed = s.load(index + 1);
  const LoadedConfig other_policy = s.load(index + 2);
  CHECK(uniform.structure_key == skewed.structure_key);
  CHECK(uniform.structure_key != other_policy.structure_key);
}

TEST_CASE("impossible combinations are rejected with the checker's path and message") {
  const SweepSpace& s = small();
  // shard 4 x replicate 1 = 4 devices of 8.
  const LoadedConfig degrees = s.load(0);
  CHECK_FALSE(degrees.scenario.has_value());
  CHECK(degrees.reason_path == "/parallel");
  CHECK(degrees.reason.find(kSmall) == 0);  // names the file
  CHECK(degrees.reason.find("the degrees multiply to 4") != std::string::npos);
  // shard 4 x replicate 2 with ep 8: EP must divide the shard group.
  const int64_t ep8 = (((0 * 2 + 1) * 3 + 2) * 2 + 0) * 2;
  const LoadedConfig ep = s.load(ep8);
  CHECK_FALSE(ep.scenario.has_value());
  CHECK(ep.reason_path == "/parallel/ep");
  CHECK(ep.reason.find("must divide fsdp.shard x cp (4)") != std::string::npos);
  // The same message as loading the same plan written out by hand.
  std::string text = R"({"name": "sweep-small", "model": "qwen3-30b-a3b", "hardware": "a100-80g-hgx", "num_devices": 8,
    "training": {"mode": "full_finetune"}, "batch": {"global_batch_size": 16, "sequence_length": 2048},
    "parallel": {"fsdp": {"shard": 4, "replicate": 1}, "ep": 2}})";
  try {
    (void)load_scenario(InputText{kSmall, text, false});
    FAIL("expected an InputError");
  } catch (const InputError& e) {
    CHECK(e.path() == degrees.reason_path);
    CHECK(std::string(e.what()) == degrees.reason);
  }
}

TEST_CASE("load_with applies arbitrary replacements (capacity planning)") {
  const SweepSpace& s = small();
  const LoadedConfig c = s.load_with({{"/batch/sequence_length", "4096"}, {"/parallel/ep", "2"}});
  REQUIRE(c.scenario.has_value());
  CHECK(c.scenario->spec.batch.sequence_length == 4096);
  CHECK(c.scenario->spec.parallel.ep == 2);
  const LoadedConfig bad = s.load_with({{"/batch/sequence_length", "0"}});
  CHECK_FALSE(bad.scenario.has_value());
  CHECK(bad.reason_path == "/batch/sequence_length");
}
