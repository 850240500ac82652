// SPDX-License-Identifier: MIT
// Every malformed file in tests/data/bad/ (one mistake away from a shipped file, see
// make_bad_inputs.py) fails to load with an InputError naming the file, the JSON path and the reason.
#include <doctest/doctest.h>

#include <fstream>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "hardware/hardware_spec.hpp"
#include "scenario/scenario_spec.hpp"

using namespace moesim;

namespace {

void load(const std::string& kind, const std::string& path) {
  if (kind == "model") {
    (void)load_model(read_input(path, "models", "MODEL"));
  } else if (kind == "hardware") {
    (void)load_hardware(read_input(path, "hardware", "HARDWARE"));
  } else {
    (void)load_scenario(read_input(path, "scenarios", "SCENARIO"));
  }
}

}  // namespace

TEST_CASE("malformed inputs: file, JSON path and message") {
  const std::string root = "tests/data/bad/";
  std::ifstream in(root + "cases.json");
  REQUIRE(in);
  const auto cases = nlohmann::json::parse(in);
  REQUIRE(cases.size() >= 50);
  for (const auto& c : cases) {
    const std::string file = c.at("file");
    CAPTURE(file);
    bool threw = false;
    try {
      load(c.at("kind"), root + file);
    } catch (const InputError& e) {
      threw = true;
      CHECK(e.file() == root + c.at("error_file").get<std::string>());
      CHECK(e.path() == c.at("path").get<std::string>());
      CHECK(e.message().find(c.at("message").get<std::string>()) != std::string::npos);
      CAPTURE(e.what());
    }
    CHECK(threw);
  }
}
