// SPDX-License-Identifier: MIT
#include <doctest/doctest.h>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/json_input.hpp"

using namespace moesim;

namespace {
InputText text(std::string s) { return InputText{"in.json", std::move(s), false}; }
}  // namespace

TEST_CASE("invalid JSON names the file, line and column") {
  try {
    (void)parse_json(text("{\n  \"a\": 1,\n  \"b\": tru\n}"));
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.file() == "in.json");
    CHECK(std::string(e.what()).starts_with("in.json: invalid JSON at line 3, column"));
  }
  CHECK_THROWS_WITH_AS(parse_json(text("{\"a\": [1, 2")), doctest::Contains("line 1"), InputError);
  CHECK_THROWS_AS(parse_json(text("")), InputError);
}

TEST_CASE("duplicate keys are rejected with their JSON path") {
  try {
    (void)parse_json(text(R"({"x": {"y": [ {"k": 1}, {"k": 2, "k": 3} ]}})"));
    FAIL("no error");
  } catch (const InputError& e) {
    CHECK(e.path() == "/x/y/1/k");
    CHECK(e.message() == "duplicate key 'k'");
  }
  // The same key in sibling objects is fine.
  CHECK_NOTHROW(parse_json(text(R"({"a": {"k": 1}, "b": {"k": 2}, "c": [{"k": 1}, {"k": 1}]})")));
}

TEST_CASE("JSON pointers escape ~ and /") {
  CHECK(pointer_append("", "a") == "/a");
  CHECK(pointer_append("/a", "b/c~d") == "/a/b~1c~0d");
}

TEST_CASE("shipped inputs are found by name; unknown names list what is shipped") {
  const InputText k3 = read_input("kimi-k3", "models", "MODEL");
  CHECK(k3.embedded);
  CHECK(k3.name == "models/kimi-k3.json");
  // A path that exists on disk wins over the embedded copy (tests run from the project root).
  const InputText disk = read_input("models/kimi-k3.json", "models", "MODEL");
  CHECK_FALSE(disk.embedded);
  CHECK(disk.text == k3.text);  // the binary embeds the files of this checkout
  CHECK_THROWS_WITH_AS(read_input("kimi-k4", "models", "MODEL"), doctest::Contains("shipped: "), InputError);
}

TEST_CASE("references resolve relative to the naming file, in the same store") {
  const InputText scenario = read_input("k3-lora-fsdp2-ep64", "scenarios", "SCENARIO");
  const InputText model = read_referenced(scenario, "/model", "../models/kimi-k3-dsa.json", "models");
  CHECK(model.embedded);
  CHECK(model.name == "models/kimi-k3-dsa.json");
  CHECK_THROWS_WITH_AS(read_referenced(scenario, "/model", "../models/nope.json", "models"),
                       doctest::Contains("/model: no such file"), InputError);
}
