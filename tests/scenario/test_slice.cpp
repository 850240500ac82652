// SPDX-License-Identifier: MIT
// `moesim slice` against the slices made by hand (scenarios/calibration/): slicing the K3 default
// at its EP64 plan gives the hand-made K3 slices' per-rank shapes and plans.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "core/json_input.hpp"
#include "scenario/scenario_spec.hpp"
#include "scenario/slice.hpp"

using namespace moesim;
namespace fs = std::filesystem;

namespace {

// Slices `ref` and loads the result from a temporary folder, as `moesim slice` writes it.
Scenario sliced(const std::string& ref, int64_t layers, int64_t devices, const std::string& hardware = "h200-x2") {
  const InputText input = read_input(ref, "scenarios", "SCENARIO");
  const Scenario source = load_scenario(input);
  const InputText model = read_referenced(input, "/model", source.spec.model, "models");
  SliceOptions o;
  o.num_layers = layers;
  o.num_devices = devices;
  o.model_ref = "slice.model.json";
  o.hardware_ref = hardware;
  const SliceFiles files = make_slice(source, input, model, o);
  const fs::path dir = fs::temp_directory_path() / ("moesim-slice-test-" + std::to_string(devices));
  fs::create_directories(dir);
  std::ofstream(dir / "slice.model.json") << files.model_json;
  std::ofstream(dir / "slice.json") << files.scenario_json;
  return load_scenario(read_input((dir / "slice.json").string(), "scenarios", "SCENARIO"));
}

void check_same_shapes(const ModelSpec& a, const ModelSpec& b) {
  CHECK(a.num_layers == b.num_layers);
  CHECK(a.hidden_size == b.hidden_size);
  CHECK(a.vocab_size == b.vocab_size);
  REQUIRE(a.layer_kinds.size() == b.layer_kinds.size());
  for (size_t i = 0; i < a.layer_kinds.size(); ++i) {
    CHECK(a.layer_kinds[i].attention == b.layer_kinds[i].attention);
    CHECK(a.layer_kinds[i].ffn == b.layer_kinds[i].ffn);
  }
  REQUIRE(a.mla.has_value() == b.mla.has_value());
  CHECK(a.mla->num_heads == b.mla->num_heads);
  CHECK(a.mla->q_lora_rank == b.mla->q_lora_rank);
  CHECK(a.mla->kv_lora_rank == b.mla->kv_lora_rank);
  REQUIRE(a.kda.has_value() == b.kda.has_value());
  CHECK(a.kda->num_heads == b.kda->num_heads);
  CHECK(a.kda->head_dim == b.kda->head_dim);
  REQUIRE(a.dsa_indexer.has_value() == b.dsa_indexer.has_value());
  CHECK(a.dsa_indexer->num_heads == b.dsa_indexer->num_heads);
  CHECK(a.dsa_indexer->top_k == b.dsa_indexer->top_k);
  REQUIRE(a.moe.has_value() == b.moe.has_value());
  CHECK(a.moe->num_experts == b.moe->num_experts);
  CHECK(a.moe->top_k == b.moe->top_k);
  CHECK(a.moe->expert_intermediate_size == b.moe->expert_intermediate_size);
  CHECK(a.moe->latent_size == b.moe->latent_size);
  CHECK(a.moe->num_shared_experts == b.moe->num_shared_experts);
  CHECK(a.dense_ffn.has_value() == b.dense_ffn.has_value());
  CHECK(a.vision.has_value() == b.vision.has_value());
  CHECK(a.attention_residuals->block_size == b.attention_residuals->block_size);
}

void check_same_plan(const ScenarioSpec& a, const ScenarioSpec& b) {
  CHECK(a.num_devices == b.num_devices);
  CHECK(a.parallel.fsdp.shard == b.parallel.fsdp.shard);
  CHECK(a.parallel.fsdp.replicate == b.parallel.fsdp.replicate);
  CHECK(a.parallel.ep == b.parallel.ep);
  CHECK(a.parallel.tp.degree == b.parallel.tp.degree);
  CHECK(a.parallel.pp.stages == b.parallel.pp.stages);
  CHECK(a.batch.global_batch_size == b.batch.global_batch_size);
  CHECK(a.batch.micro_batch_size == b.batch.micro_batch_size);
  CHECK(a.batch.sequence_length == b.batch.sequence_length);
  CHECK(a.training.mode == b.training.mode);
  CHECK(a.training.lora->rank == b.training.lora->rank);
  CHECK(a.recompute.policy == b.recompute.policy);
  CHECK(a.loss.kind == b.loss.kind);
  // What the executor runs: the expert all-to-all in one piece, the GEMMs unsplit.
  CHECK(a.overlap.moe_local_first == b.overlap.moe_local_first);
  CHECK(a.overlap.moe_dispatch_chunks == b.overlap.moe_dispatch_chunks);
}

}  // namespace

TEST_CASE("slicing the K3 default over 2 devices gives k3-slice-2gpu's shapes: 28 experts, 14 per GPU, EP2") {
  const Scenario s = sliced("k3-lora-fsdp2-ep64", 2, 2);
  const Scenario hand = load_scenario(read_input("k3-slice-2gpu", "scenarios", "SCENARIO"));
  check_same_shapes(s.model, hand.model);
  check_same_plan(s.spec, hand.spec);
  // The EP64 rank's rows per expert: 8,192 tokens x top-16 x 2 GPUs / 28 experts = 9,362.
  CHECK(s.spec.batch.sequence_length * s.model.moe->top_k * s.spec.num_devices / s.model.moe->num_experts == 9362);
  CHECK(s.hardware.name == "h200-x2");
}

TEST_CASE("slicing the K3 default onto 1 device gives k3-slice-1gpu's shapes: the 14 experts of one EP64 rank, top-14") {
  const Scenario s = sliced("k3-lora-fsdp2-ep64", 2, 1);
  const Scenario hand = load_scenario(read_input("k3-slice-1gpu", "scenarios", "SCENARIO"));
  check_same_shapes(s.model, hand.model);
  check_same_plan(s.spec, hand.spec);
}

TEST_CASE("a TP rank's shapes: heads and widths divided by the plan's TP degree") {
  // The K3 sweep's axes are dropped; its base plan is sliced. Under TP 2 the heads halve.
  const InputText input = read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO");
  Scenario source = load_scenario(input);
  const InputText model = read_referenced(input, "/model", source.spec.model, "models");
  source.spec.parallel.tp.degree = 2;  // the slice reads the plan from the loaded spec
  SliceOptions o;
  o.model_ref = "m.json";
  o.hardware_ref = "h200-x2";
  const SliceFiles files = make_slice(source, input, model, o);
  CHECK(files.model_json.find("\"num_heads\": 48") != std::string::npos);  // 96 MLA and KDA heads / 2
  CHECK(files.model_json.find("\"vocab_size\": 81920") != std::string::npos);
}

TEST_CASE("bad slice options name the flag; context parallelism is refused at its JSON path") {
  const InputText input = read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO");
  Scenario source = load_scenario(input);
  const InputText model = read_referenced(input, "/model", source.spec.model, "models");
  SliceOptions o;
  o.num_layers = 0;
  CHECK_THROWS_WITH_AS(make_slice(source, input, model, o), doctest::Contains("--layers"), InputError);
  o.num_layers = 2;
  o.num_devices = 129;
  CHECK_THROWS_WITH_AS(make_slice(source, input, model, o), doctest::Contains("--devices"), InputError);
  o.num_devices = 2;
  source.spec.parallel.cp = 2;
  CHECK_THROWS_WITH_AS(make_slice(source, input, model, o), doctest::Contains("/parallel/cp"), InputError);
}
