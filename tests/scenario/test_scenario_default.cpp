// SPDX-License-Identifier: MIT
#include <doctest/doctest.h>

#include <filesystem>

#include "core/embedded.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;

TEST_CASE("the embedded default is LoRA fine-tuning of K3 with FSDP2 + EP64 on a 128-device supernode") {
  const Scenario s = load_scenario(read_input(std::string(kDefaultScenario), "scenarios", "SCENARIO"));
  CHECK(s.model.name == "kimi-k3-dsa");
  CHECK(s.hardware.name == "supernode-128");
  CHECK(s.spec.num_devices == 128);
  CHECK(s.spec.training.mode == TrainingMode::lora);
  CHECK(s.spec.training.lora->rank > 0);
  CHECK_FALSE(s.spec.training.lora->targets.empty());
  CHECK(s.spec.parallel.fsdp.shard == 128);
  CHECK(s.spec.parallel.ep == 64);
  CHECK(s.spec.training.precision.compute == Dtype::bf16);
  CHECK(s.spec.swap.enabled);
  CHECK(s.spec.loss.kind == LossKind::cce);
  CHECK(s.spec.doc.find("8,192-token") != std::string::npos);  // the doc says why this sequence length
}

TEST_CASE("every file in scenarios/ loads, is embedded and names itself") {
  for (const auto& entry : std::filesystem::directory_iterator("scenarios")) {
    if (!entry.is_regular_file()) continue;
    const std::string path = "scenarios/" + entry.path().filename().string();
    CAPTURE(path);
    const Scenario s = load_scenario(read_input(path, "scenarios", "SCENARIO"));
    CHECK(s.spec.name + ".json" == entry.path().filename().string());
    CHECK(find_embedded(path).has_value());
  }
}

TEST_CASE("sweep axes take values valid for the fields they name") {
  const std::string text = R"({
    "name": "t", "model": "kimi-k3-dsa", "hardware": "supernode-128", "num_devices": 128,
    "training": {"mode": "pretrain"},
    "batch": {"global_batch_size": 128, "sequence_length": 4096},
    "parallel": {"fsdp": {"shard": 128}, "ep": 64},
    "sweep": {"axes": [{"path": "/parallel/ep", "values": [8, 16, 32, 64]},
                       {"path": "/recompute/policy", "values": ["none", "full"]},
                       {"path": "/swap/enabled", "values": [true, false]}]}})";
  const Scenario s = load_scenario(InputText{"t.json", text, false});
  REQUIRE(s.spec.sweep.axes.size() == 3);
  CHECK(s.spec.sweep.axes[0].values.size() == 4);
  CHECK(s.spec.sweep.axes[1].values[1].text == "\"full\"");
}

TEST_CASE("a skewed or replayed routing distribution is accepted with its parameter") {
  std::string text = R"({
    "name": "t", "model": "qwen3-30b-a3b", "hardware": "h200-hgx", "num_devices": 8,
    "training": {"mode": "full_finetune"},
    "batch": {"global_batch_size": 16, "micro_batch_size": 2, "sequence_length": 4096},
    "parallel": {"fsdp": {"shard": 8}, "ep": 8},
    "routing": {"distribution": "skewed", "skew": 1.2, "seed": 7}})";
  const Scenario s = load_scenario(InputText{"t.json", text, false});
  CHECK(s.spec.routing.skew == doctest::Approx(1.2));
  CHECK(s.spec.parallel.dp() == 8);
}
