// SPDX-License-Identifier: MIT
// Every declared input field carries a one-line doc, and the reference page covers them all.
#include <doctest/doctest.h>

#include <fstream>
#include <set>
#include <sstream>

#include "app/input_info.hpp"

using namespace moesim;

TEST_CASE("every declared field has a type and a doc sentence") {
  std::set<std::string> seen;
  for (const auto& rows : {describe_model_fields(), describe_hardware_fields(), describe_scenario_fields()}) {
    CHECK(rows.size() > 10);
    for (const auto& r : rows) {
      CAPTURE(r.path);
      CHECK_FALSE(r.type.empty());
      CHECK(r.doc.size() > 8);
      CHECK((r.doc.ends_with(".") || r.doc.ends_with(".)")));
      CHECK(r.doc.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("docs/inputs.md is what `moesim describe --markdown` prints") {
  std::ifstream in("docs/inputs.md");
  REQUIRE(in);
  std::stringstream doc;
  doc << in.rdbuf();
  // Regenerate with: build/moesim describe --markdown > docs/inputs.md
  CHECK(doc.str() == describe_markdown(""));
}
