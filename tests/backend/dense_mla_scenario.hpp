// SPDX-License-Identifier: MIT
// The 1-GPU K3 calibration slice with its MLA layer dense (no DSA indexer), so that the step graph
// has flash_attention ops (forward, recompute, backward) at T = 8192: what the executor runs
// through cuDNN's fused SDPA. Written to a temporary folder (the model is a file the scenario
// names); the object removes it.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/json_input.hpp"
#include "scenario/scenario_spec.hpp"

namespace moesim::test {

class DenseMlaSlice {
 public:
  DenseMlaSlice() : dir_(std::filesystem::temp_directory_path() / "moesim-test-dense-mla"), scenario(load(dir_)) {}
  ~DenseMlaSlice() {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  DenseMlaSlice(const DenseMlaSlice&) = delete;
  DenseMlaSlice& operator=(const DenseMlaSlice&) = delete;

 private:
  std::filesystem::path dir_;

  static Scenario load(const std::filesystem::path& dir) {
    const std::filesystem::path base = std::filesystem::absolute("scenarios/calibration");
    nlohmann::json sc =
        nlohmann::json::parse(read_input("scenarios/calibration/k3-slice-1gpu.json", "scenarios", "SCENARIO").text);
    nlohmann::json model = nlohmann::json::parse(
        read_input((base / sc["model"].get<std::string>()).lexically_normal().string(), "models", "MODEL").text);
    model.erase("dsa_indexer");
    for (auto& o : model["layers"]["overrides"]) {
      if (o.value("attention", "") == "mla_dsa") o["attention"] = "mla";
    }
    std::filesystem::create_directories(dir);
    std::ofstream(dir / "model.json") << model.dump(2);
    if (sc.contains("fused_ops")) sc["fused_ops"].erase("dsa");  // no DSA layers left to fuse
    sc["model"] = "model.json";
    sc["hardware"] = (base / sc["hardware"].get<std::string>()).lexically_normal().string();
    return load_scenario(InputText{(dir / "scenario.json").string(), sc.dump(), false});
  }

 public:
  const Scenario scenario;
};

}  // namespace moesim::test
